package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/heterps/heterps/daemon/wire"
)

// Link reaches one partner replica of a neighbouring stage.
type Link struct {
	Transport wire.Transport
	Peer      string // the partner's node id
	Stream    uint32 // EdgeStream of the pair
	job       uint64 // the worker's ps.JobKey: messages of other jobs are dropped
}

// Partners returns the replicas of a neighbouring stage with n replicas
// that replica j of a stage with r replicas exchanges with: every k in
// [0, n) with k ≡ j (mod min(r, n)), ascending.
func Partners(j, r, n int) []int {
	m := min(r, n)
	var out []int
	for k := j % m; k < n; k += m {
		out = append(out, k)
	}
	return out
}

// EdgeStream is the stream replica up of stage and replica down of stage+1
// exchange activations and gradients on (each direction has its own
// queue). Stages and replicas are below 1024.
func EdgeStream(stage, up, down int) uint32 {
	return 1<<30 | uint32(stage)<<20 | uint32(up)<<10 | uint32(down)
}

// PartnerLinks returns the Prev and Next links of replica r of stage in a
// job whose stages have replicas[i] replicas each: its partners by
// Partners, each named by node(stage, replica) and reached through t on
// the pair's EdgeStream.
func PartnerLinks(t wire.Transport, stage, r int, replicas []int, node func(stage, replica int) string) (prev, next []Link) {
	if stage > 0 {
		for _, up := range Partners(r, replicas[stage], replicas[stage-1]) {
			prev = append(prev, Link{Transport: t, Peer: node(stage-1, up), Stream: EdgeStream(stage-1, up, r)})
		}
	}
	if stage+1 < len(replicas) {
		for _, down := range Partners(r, replicas[stage], replicas[stage+1]) {
			next = append(next, Link{Transport: t, Peer: node(stage+1, down), Stream: EdgeStream(stage, r, down)})
		}
	}
	return prev, next
}

func (l Link) send(ctx context.Context, m *wire.Message) error {
	if err := l.Transport.Send(ctx, l.Peer, l.Stream, m); err != nil {
		return fmt.Errorf("send %v to %s: %w", m.Type, l.Peer, err)
	}
	return nil
}

// recv returns the next message of l's job from l, which must be of type
// want for micro-batch micro of step. Messages of another job are left
// over from one that ran on the same pair of nodes (a job restarted after
// a failure, say): they are dropped.
func (l Link) recv(ctx context.Context, want wire.MsgType, step int64, micro int) (*wire.MessageView, error) {
	m, err := wire.RecvShared(ctx, l.Transport, l.Peer, l.Stream) // its callers decode, then release it
	for err == nil && m.Meta.Job != l.job {
		m.Release()
		m, err = wire.RecvShared(ctx, l.Transport, l.Peer, l.Stream)
	}
	if err != nil {
		return nil, fmt.Errorf("receive %v from %s: %w", want, l.Peer, err)
	}
	if m.Type != want || m.Meta.Step != uint64(step) || m.Meta.Micro != uint64(micro) {
		m.Release()
		return nil, fmt.Errorf("from %s: got %v for step %d micro-batch %d, want %v for step %d micro-batch %d",
			l.Peer, m.Type, m.Meta.Step, m.Meta.Micro, want, step, micro)
	}
	return m, nil
}

// sender sends a step's messages in the background, in the order they were
// queued, so that computing the next micro-batch overlaps sending the last.
// After a failed send it skips the rest and cancels the step.
type sender struct {
	ctx    context.Context // the step's
	cancel context.CancelFunc
	queue  chan func() error
	done   chan struct{}
	err    error
}

func startSender(ctx context.Context, cancel context.CancelFunc) *sender {
	s := &sender{ctx: ctx, cancel: cancel, queue: make(chan func() error, 64), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *sender) run() {
	defer close(s.done)
	for send := range s.queue {
		if s.err != nil {
			continue
		}
		if s.err = send(); s.err != nil {
			s.cancel()
		}
	}
}

// send queues a send.
func (s *sender) send(f func() error) { s.queue <- f }

// wait waits for every queued send and returns the first error.
func (s *sender) wait() error {
	close(s.queue)
	<-s.done
	return s.err
}

// each runs f(0..n-1) in parallel (inline when n is 1) and joins the errors.
func each(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
