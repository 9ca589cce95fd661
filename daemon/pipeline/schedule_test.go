package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

func TestOrderAlternatesAfterTheWarmUp(t *testing.T) {
	f := func(m int) op { return op{m: m} }
	b := func(m int) op { return op{m: m, backward: true} }
	for _, tc := range []struct {
		warm, micros int
		want         []op
	}{
		{2, 5, []op{f(0), f(1), f(2), b(0), f(3), b(1), f(4), b(2), b(3), b(4)}},
		{1, 3, []op{f(0), f(1), b(0), f(2), b(1), b(2)}},
		{3, 3, []op{f(0), f(1), f(2), b(0), b(1), b(2)}}, // fill-drain, or a deep pipeline
		{0, 3, []op{f(0), f(1), f(2)}},                   // the last stage: backwards run with the forwards
		{1, 1, []op{f(0), b(0)}},
	} {
		if got := order(tc.warm, tc.micros); !slices.Equal(got, tc.want) {
			t.Errorf("order(%d, %d) = %v, want %v", tc.warm, tc.micros, got, tc.want)
		}
	}
}

func TestWarmupAndLiveBound(t *testing.T) {
	for _, tc := range []struct {
		s                                Schedule
		stage, stages, micros, lookahead int
		warm, live                       int
	}{
		{OneFOneB, 0, 3, 8, 0, 2, 3},
		{OneFOneB, 1, 3, 8, 0, 1, 2},
		{OneFOneB, 2, 3, 8, 0, 0, 1},
		{OneFOneB, 0, 4, 2, 0, 2, 2}, // fewer micro-batches than the depth
		{OneFOneB, 0, 3, 8, 1, 3, 4},
		{OneFOneB, 1, 3, 8, 2, 3, 4},
		{OneFOneB, 2, 3, 8, 2, 0, 1}, // the last stage runs each backward with its forward
		{OneFOneB, 0, 2, 4, 5, 4, 4}, // no more than the step's micro-batches
		{FillDrain, 0, 3, 8, 0, 8, 8},
		{FillDrain, 0, 3, 8, 1, 8, 8},
		{FillDrain, 2, 3, 8, 0, 0, 1},
		{OneFOneB, 0, 1, 4, 1, 0, 1},
	} {
		w, l := warmup(tc.s, tc.stage, tc.stages, tc.micros, tc.lookahead), liveBound(tc.s, tc.stage, tc.stages, tc.micros, tc.lookahead)
		if w != tc.warm || l != tc.live {
			t.Errorf("%s stage %d of %d, %d micro-batches, lookahead %d: warm-up %d, live %d; want %d, %d",
				tc.s, tc.stage, tc.stages, tc.micros, tc.lookahead, w, l, tc.warm, tc.live)
		}
	}
}

func TestParseSchedule(t *testing.T) {
	for in, want := range map[string]Schedule{"": OneFOneB, "1f1b": OneFOneB, "fill-drain": FillDrain} {
		if got, err := ParseSchedule(in); err != nil || got != want {
			t.Errorf("ParseSchedule(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseSchedule("gpipe"); err == nil {
		t.Error("ParseSchedule(gpipe): no error")
	}
}

// pipeCase is a pipeline layout to train under both schedules.
type pipeCase struct {
	stages   []Range
	replicas []int
	micro    int
	shares   []Share
}

func (c pipeCase) String() string {
	s := fmt.Sprintf("%d stages %v, %d micro-batches", len(c.stages), c.replicas, c.micro)
	if c.shares != nil {
		s += ", lanes " + fmt.Sprint(c.shares[0].Next)
	}
	return s
}

var (
	twoStages   = []Range{{0, 2}, {3, 5}}
	threeStages = []Range{{0, 2}, {3, 4}, {5, 5}}
)

// lanes gives stage 0 (one replica) a batch of 13 split (5, 8) over the
// two replicas of each later stage.
func lanes(stages int) []Share {
	out := []Share{{Members: []int{0}, Batches: []int{13}, Next: []int{5, 8}}}
	for range stages - 1 {
		out = append(out, Share{Members: []int{0, 1}, Batches: []int{5, 8}})
	}
	return out
}

// trainUnder trains c's job for steps under schedule s with lookahead,
// with tune (if set) changing the transports' wire config, and returns
// the job and the last stage's losses.
func trainUnder(t *testing.T, c pipeCase, s Schedule, lookahead int, steps int64, tune func(*wire.Config)) (*job, [][]float64) {
	t.Helper()
	cfg := modelConfig(t, adamAdagrad)
	j := newJob(t, cfg, c.stages, c.replicas, steps, ps.BSP)
	j.micro, j.shares, j.schedule, j.lookahead, j.tuneWire = c.micro, c.shares, s, lookahead, tune
	losses := j.run(func(int) func(context.Context, int64) (*data.Batch, error) {
		return fixedBatches(func(step int64) *data.Batch { return testBatch(60, uint64(step), 13) })
	})
	return j, losses
}

// serverParams returns every parameter the servers hold after the job:
// each dense block and every row of every table.
func (j *job) serverParams() map[string][]float32 {
	j.t.Helper()
	declared, err := DeclareModel(native.MustCPU(), j.cfg, testSeed)
	if err != nil {
		j.t.Fatal(err)
	}
	c := j.client(0, 0)
	var all []int64
	for i := range int64(testVocab) {
		all = append(all, i)
	}
	out := map[string][]float32{}
	for _, p := range declared.Params() {
		var v []float32
		if p.Sparse {
			v, _, err = c.Pull(context.Background(), p.Name, all, j.steps)
		} else {
			v, _, err = c.PullBlock(context.Background(), p.Name, j.steps)
		}
		if err != nil {
			j.t.Fatal(err)
		}
		out[p.Name] = v
	}
	return out
}

// wantPeak is the most micro-batches stage of stages may hold live under s
// with lookahead.
func wantPeak(s Schedule, stage, stages, micros, lookahead int) int {
	if stage == stages-1 {
		return 1
	}
	if s == FillDrain {
		return micros
	}
	return min(stages-stage+lookahead, micros)
}

// checkPeaks fails unless every worker of j held at most, and at some step
// exactly, the live micro-batches its schedule allows.
func checkPeaks(t *testing.T, j *job, c pipeCase, s Schedule, lookahead int) {
	t.Helper()
	for st, peaks := range j.peak {
		for r, got := range peaks {
			if want := wantPeak(s, st, len(c.stages), c.micro, lookahead); got != want {
				t.Errorf("%v, %s, lookahead %d: stage %d replica %d held %d micro-batches live at once, want %d", c, s, lookahead, st, r, got, want)
			}
		}
	}
}

// sameTraining fails unless two runs' losses and server parameters are
// bit-identical.
func sameTraining(t *testing.T, what string, a, b *job, la, lb [][]float64) {
	t.Helper()
	for r := range la {
		if !slices.Equal(la[r], lb[r]) {
			t.Fatalf("%s: losses of replica %d %v and %v differ", what, r, la[r], lb[r])
		}
	}
	pa, pb := a.serverParams(), b.serverParams()
	for name, va := range pa {
		if !slices.Equal(va, pb[name]) {
			t.Fatalf("%s: %s differs between the runs", what, name)
		}
	}
}

// 1F1B trains bit for bit as fill-drain does — same losses, same
// parameters on the servers — for 2 and 3 stages, 1 to 8 micro-batches of
// unequal rows (13 over 8 is 2 or 1 each) and lanes of unequal batches,
// strict and with a lookahead of 1, while each stage but the last holds at
// most min(S-i+lookahead, M) micro-batches' forward state at once
// (fill-drain: M) and reaches that bound.
func TestOneFOneBEqualsFillDrainBitForBit(t *testing.T) {
	checkLeaks(t)
	const steps = 3
	var cases []pipeCase
	for _, micro := range []int{1, 2, 4, 8} {
		cases = append(cases, pipeCase{stages: twoStages, replicas: []int{1, 1}, micro: micro},
			pipeCase{stages: threeStages, replicas: []int{1, 1, 1}, micro: micro})
	}
	cases = append(cases, pipeCase{stages: twoStages, replicas: []int{1, 2}, micro: 4, shares: lanes(2)},
		pipeCase{stages: threeStages, replicas: []int{1, 2, 2}, micro: 4, shares: lanes(3)})
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			fd, fdLosses := trainUnder(t, c, FillDrain, 0, steps, nil)
			checkPeaks(t, fd, c, FillDrain, 0)
			for _, lookahead := range []int{0, 1} {
				ofob, ofobLosses := trainUnder(t, c, OneFOneB, lookahead, steps, nil)
				checkPeaks(t, ofob, c, OneFOneB, lookahead)
				sameTraining(t, fmt.Sprintf("%v, lookahead %d", c, lookahead), fd, ofob, fdLosses, ofobLosses)
			}
		})
	}
}

// With room for one message per connection (QueueBytes 1: a message is
// taken only when none waits) 1F1B's interleaved sends and receives still
// never wait in a cycle, strict or looking ahead: the steps finish, within
// a short ReadTimeout for a reader held up by a full queue, and train as
// with the default queues.
func TestOneFOneBWithTinyQueues(t *testing.T) {
	checkLeaks(t)
	const steps = 3
	tiny := func(c *wire.Config) {
		c.QueueBytes, c.QueueDepth, c.ReadTimeout = 1, 1, 10*time.Second
	}
	for _, c := range []pipeCase{
		{stages: threeStages, replicas: []int{1, 1, 1}, micro: 8},
		{stages: threeStages, replicas: []int{1, 2, 2}, micro: 4, shares: lanes(3)},
	} {
		t.Run(c.String(), func(t *testing.T) {
			ref, refLosses := trainUnder(t, c, OneFOneB, 0, steps, nil)
			for _, lookahead := range []int{0, 2} {
				small, smallLosses := trainUnder(t, c, OneFOneB, lookahead, steps, tiny)
				sameTraining(t, fmt.Sprintf("%v, lookahead %d", c, lookahead), small, ref, smallLosses, refLosses)
			}
		})
	}
}

// lateGradients holds back each gradient the last stage sends for
// micro-batch m until it has received micro-batch m+2's activation, by
// which time its one layer copy has run micro-batch m+1's backward over
// the buffers micro-batch m's gradient came from.
type lateGradients struct {
	wire.Transport
	micros int
	mu     sync.Mutex
	got    map[[2]uint64]chan struct{} // closed once (step, micro)'s activation is in
}

func (l *lateGradients) arrived(step, micro uint64) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := [2]uint64{step, micro}
	if l.got[k] == nil {
		l.got[k] = make(chan struct{})
	}
	return l.got[k]
}

func (l *lateGradients) Recv(ctx context.Context, from string, stream uint32) (*wire.MessageView, error) {
	m, err := l.Transport.Recv(ctx, from, stream)
	if err == nil && m.Type == wire.MsgActivation {
		close(l.arrived(m.Meta.Step, m.Meta.Micro))
	}
	return m, err
}

func (l *lateGradients) Send(ctx context.Context, to string, stream uint32, m *wire.Message) error {
	if later := m.Meta.Micro + 2; m.Type == wire.MsgGradient && later < uint64(l.micros) {
		select {
		case <-l.arrived(m.Meta.Step, later):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return l.Transport.Send(ctx, to, stream, m)
}

// The last stage keeps one layer copy and may run the next micro-batch's
// backward while the previous one's input gradient still waits to be
// sent: what it sends is its own copy, not the layers' buffers. Upstream
// runs fill-drain here, so that it sends every activation without waiting
// for a gradient; the gradients that come late still train as prompt ones.
func TestLastStageSendsItsGradientsWhateverItRunsNext(t *testing.T) {
	checkLeaks(t)
	const steps, micro = 2, 4
	c := pipeCase{stages: twoStages, replicas: []int{1, 1}, micro: micro}
	run := func(late bool) (*job, [][]float64) {
		j := newJob(t, modelConfig(t, adamAdagrad), c.stages, c.replicas, steps, ps.BSP)
		j.micro, j.schedules = micro, []Schedule{FillDrain, OneFOneB}
		if late {
			j.wrap = func(stage int, tr wire.Transport) wire.Transport {
				if stage == 0 {
					return tr
				}
				return &lateGradients{Transport: tr, micros: micro, got: map[[2]uint64]chan struct{}{}}
			}
		}
		losses := j.run(func(int) func(context.Context, int64) (*data.Batch, error) {
			return fixedBatches(func(step int64) *data.Batch { return testBatch(61, uint64(step), 13) })
		})
		return j, losses
	}
	prompt, promptLosses := run(false)
	late, lateLosses := run(true)
	sameTraining(t, "late gradients", prompt, late, promptLosses, lateLosses)
}

// A worker builds only the layer copies its schedule keeps live: stage 0
// of 3 with 8 micro-batches, 3 under 1F1B, 5 with a lookahead of 2 and 8
// under fill-drain, and each micro-batch still gets its own gradient
// buffers.
func TestWorkerBuildsTheLayerCopiesItsScheduleHolds(t *testing.T) {
	cfg := modelConfig(t, adamAdagrad)
	for _, tc := range []struct {
		s               Schedule
		lookahead, want int
	}{{OneFOneB, 0, 3}, {OneFOneB, 2, 5}, {FillDrain, 0, 8}} {
		s := tc.s
		w, err := NewWorker(Config{Job: testJob, Stages: 3, Layers: Range{0, 2}, Model: buildStageModel(t, cfg, Range{0, 2}),
			Backend: native.MustCPU(), PS: &ps.Client{}, Next: []Link{{Peer: "x", Stream: 1}},
			Batches: fixedBatches(func(int64) *data.Batch { return nil }), MicroBatches: 8, Schedule: s, Lookahead: tc.lookahead})
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		if len(w.copies) != tc.want || len(w.grads) != 8 {
			t.Errorf("%s, lookahead %d: %d layer copies and %d micro-batch gradients, want %d and 8", s, tc.lookahead, len(w.copies), len(w.grads), tc.want)
		}
		seen := map[native.Buffer]bool{}
		for _, g := range w.grads {
			for _, b := range g.dense {
				if seen[b] {
					t.Fatalf("%s: two micro-batches share a gradient buffer", s)
				}
				seen[b] = true
			}
		}
	}
}
