package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
)

// peerSet adds partner nodes to the wire transport while some task needs
// them, and removes them (closing the connection and whatever it still
// queues) when the last such task ends. Peers are named by their data
// addresses, which are also their transport node ids.
type peerSet struct {
	t    wire.Transport
	mu   sync.Mutex
	refs map[string]int
}

func newPeerSet(t wire.Transport) *peerSet { return &peerSet{t: t, refs: map[string]int{}} }

func (p *peerSet) acquire(addrs []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, a := range addrs {
		if p.refs[a] == 0 {
			if err := p.t.AddPeer(a, a); err != nil {
				p.releaseLocked(addrs[:i])
				return err
			}
		}
		p.refs[a]++
	}
	return nil
}

func (p *peerSet) release(addrs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(addrs)
}

func (p *peerSet) releaseLocked(addrs []string) {
	for _, a := range addrs {
		if p.refs[a]--; p.refs[a] <= 0 {
			delete(p.refs, a)
			_ = p.t.RemovePeer(a)
		}
	}
}

// Greeting texts.
const (
	greetHello = "hello" // I am here
	greetAck   = "ack"   // I am here and have heard you
)

// greetStream is the stream a link's partners greet each other on, beside
// the link's EdgeStream.
func greetStream(l pipeline.Link) uint32 { return l.Stream&^(1<<30) | 1<<29 }

// greet waits until every link's partner is up and the connection to it
// is one both ends accepted. The transport lets the node with the smaller
// id dial, and the other refuses a dial from a node it does not know yet
// (its task may come a heartbeat later); a message sent on such a refused
// connection is lost. So each side sends hellos until it hears its
// partner, then acks; a side is done once it has an ack, which it answers
// with a last ack.
func greet(ctx context.Context, links []pipeline.Link, job string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		wg.Go(func() { errs[i] = greetOne(ctx, l, ps.JobKey(job)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func greetOne(ctx context.Context, l pipeline.Link, job uint64) error {
	stream := greetStream(l)
	send := func(text string) error {
		return l.Transport.Send(ctx, l.Peer, stream, &wire.Message{Type: wire.MsgAck, Meta: wire.Meta{Job: job}, Text: text})
	}
	heard := false
	wait := 50 * time.Millisecond
	var last error
	for ctx.Err() == nil {
		text := greetHello
		if heard {
			text = greetAck
		}
		if last = send(text); last != nil {
			sleep(ctx, wait)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, wait)
		m, err := l.Transport.Recv(rctx, l.Peer, stream)
		cancel()
		wait = min(2*wait, time.Second)
		if err != nil {
			last = err
			if rctx.Err() == nil { // the connection dropped: give it time
				sleep(ctx, wait)
			}
			continue
		}
		ack := m.Type == wire.MsgAck && m.Meta.Job == job && m.Text == greetAck
		if m.Type == wire.MsgAck && m.Meta.Job == job {
			heard = true
		}
		m.Release()
		if ack {
			_ = send(greetAck)
			return nil
		}
	}
	return fmt.Errorf("partner %s did not come up: %w (last: %v)", l.Peer, ctx.Err(), last)
}
