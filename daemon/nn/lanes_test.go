package nn

import (
	"context"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/internal/threadtest"
	"github.com/heterps/heterps/native"
)

// laneCTR is ctrdnn's shape, small enough that with batches of 16 rows no
// GEMM is split into row blocks, so that every op's result is the same at
// any thread count and lanes can be compared with the serial order bit for
// bit.
const laneCTR = `version = 1
name = "smallctr"
task = "ctr"
[input]
dense = 13
slots = 26
vocab = 100001
[[layer]]
name = "emb"
kind = "embedding"
dim = 4
[[layer]]
name = "concat"
kind = "concat"
[[layer]]
name = "fc1"
kind = "fc"
in = 117
out = 32
act = "relu"
[[layer]]
name = "fc2"
kind = "fc"
in = 32
out = 16
act = "relu"
[[layer]]
name = "logit"
kind = "fc"
in = 16
out = 1
[loss]
kind = "bce"
[optimizer]
kind = "adam"
lr = 0.01
[sparse_optimizer]
kind = "adam"
lr = 0.01
`

func cpuThreads(t *testing.T, n int) *native.CPU {
	t.Helper()
	b, err := native.NewCPU(native.CPUOptions{Threads: n})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// trainCopies trains one trainer per backend on the same batches, calling
// each one's setup first, and returns the trainers.
func trainCopies(t *testing.T, cfg *config.Model, size, steps int, backends []native.Backend, setup func(*Trainer)) []*Trainer {
	t.Helper()
	var trs []*Trainer
	for _, b := range backends {
		tr, err := NewTrainer(b, cfg, 7, int64(steps))
		if err != nil {
			t.Fatal(err)
		}
		setup(tr)
		trs = append(trs, tr)
	}
	src := openData(t, "synthetic:2", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	for range steps {
		b, err := src.Next(context.Background(), size)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			if _, err := tr.Step(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	return trs
}

// sameParams fails unless a and b hold bit-identical parameter values.
func sameParams(t *testing.T, a, b *Trainer) {
	t.Helper()
	pa, pb := a.Model.Params(), b.Model.Params()
	for i := range pa {
		va, err := hostFloats(a.Backend, pa[i].Value)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := hostFloats(b.Backend, pb[i].Value)
		if err != nil {
			t.Fatal(err)
		}
		for j := range va {
			if math.Float32bits(va[j]) != math.Float32bits(vb[j]) {
				t.Fatalf("%s[%d]: %v and %v", pa[i].Name, j, va[j], vb[j])
			}
		}
	}
}

func laneModel(t *testing.T) *config.Model {
	t.Helper()
	cfg, err := config.ParseModel("smallctr.toml", []byte(laneCTR))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestLanesMatchTheSerialOrderBitForBit: at 2 threads the weight gradients
// and the sparse update run on a side lane; the parameters after training
// equal those of the serial order.
func TestLanesMatchTheSerialOrderBitForBit(t *testing.T) {
	two := cpuThreads(t, 2)
	n := 0
	trs := trainCopies(t, laneModel(t), 16, 20, []native.Backend{two, two}, func(tr *Trainer) {
		if n++; n == 2 {
			tr.Model.serial, tr.Opt.serial = true, true
		}
	})
	lanes, serial := trs[0], trs[1]
	// 3 FC layers: a weight gradient for each of fc1's two input parts and
	// for fc2 and logit, then the update of each layer's weight and bias.
	if lanes.Model.sideJobs != 4+6 {
		t.Fatalf("the side lane ran %d jobs, want 10", lanes.Model.sideJobs)
	}
	if serial.Model.sideJobs != 0 || serial.Opt.sideJobs != 0 {
		t.Fatal("the serial reference used a side lane")
	}
	sameParams(t, lanes, serial)
}

// TestUpdatesDuringBackwardMatchApplyAfter: at one thread a step updates
// each layer right after its backward; the parameters equal those of
// Gradients then Apply.
func TestUpdatesDuringBackwardMatchApplyAfter(t *testing.T) {
	one := cpuThreads(t, 1)
	n := 0
	trs := trainCopies(t, laneModel(t), 16, 20, []native.Backend{one, one}, func(tr *Trainer) {
		if n++; n == 2 {
			tr.Opt.serial = true
		}
	})
	sameParams(t, trs[0], trs[1])
}

// TestApplySparseBesideDense: Apply itself (clipping on, or a caller such
// as a data-parallel worker) updates the sparse tables on a side lane at 2
// threads, with the serial order's result.
func TestApplySparseBesideDense(t *testing.T) {
	cfg := laneModel(t)
	cfg.Optimizer.ClipNorm = 1e9 // on, never reached: Step updates after backward
	two := cpuThreads(t, 2)
	n := 0
	trs := trainCopies(t, cfg, 16, 10, []native.Backend{two, two}, func(tr *Trainer) {
		if n++; n == 2 {
			tr.Model.serial, tr.Opt.serial = true, true
		}
	})
	if trs[0].Opt.sideJobs != 1 || trs[1].Opt.sideJobs != 0 {
		t.Fatalf("Apply's side lane ran %d and %d jobs, want 1 and 0", trs[0].Opt.sideJobs, trs[1].Opt.sideJobs)
	}
	sameParams(t, trs[0], trs[1])
}

// TestOneThreadRunsNoLane: a 1-thread backend has no threads to spare.
func TestOneThreadRunsNoLane(t *testing.T) {
	trs := trainCopies(t, laneModel(t), 16, 2, []native.Backend{cpuThreads(t, 1)}, func(*Trainer) {})
	if trs[0].Model.sideJobs != 0 || trs[0].Opt.sideJobs != 0 {
		t.Fatal("a 1-thread backend ran a side lane")
	}
}

// TestEqualThreadCountsAreBitIdentical: two ctrdnn-wide runs at 2 threads
// (GEMMs large enough to split, lanes on) end with the same parameters.
func TestEqualThreadCountsAreBitIdentical(t *testing.T) {
	cfg := laneModel(t)
	cfg.Layers[2].Out, cfg.Layers[3].In = 512, 512 // fc1's forward GEMM splits: 512x512x117
	a, b := cpuThreads(t, 2), cpuThreads(t, 2)
	trs := trainCopies(t, cfg, 512, 6, []native.Backend{a, b}, func(*Trainer) {})
	sameParams(t, trs[0], trs[1])
}

// TestBackwardThenRunsEachDoneBehindItsWeightGradients: a stage's backward
// that ships each layer's gradients as soon as they are final (done(i))
// runs the weight gradients on the side lane too, with each dense layer's
// done behind them, in layer order; a layer without dense parameters (the
// embedding) is done on the pass's own goroutine as its backward returns.
// Every done sees its layer's gradients exactly as the serial order
// computes them.
func TestBackwardThenRunsEachDoneBehindItsWeightGradients(t *testing.T) {
	run := doneRecorder(t, 2)
	lanes, got, order := run(false)
	serial, want, wantOrder := run(true)
	dense := len(denseOnly(lanes, order))
	if lanes.sideJobs != 4+dense {
		t.Fatalf("the side lane ran %d jobs, want the 4 weight gradients and %d dense layers' done calls", lanes.sideJobs, dense)
	}
	if serial.sideJobs != 0 {
		t.Fatal("the serial reference used a side lane")
	}
	if !slices.Equal(denseOnly(lanes, order), denseOnly(serial, wantOrder)) || len(order) != len(wantOrder) {
		t.Fatalf("done order %v, want the dense layers as in %v and every layer once", order, wantOrder)
	}
	sameGrads(t, got, want)
}

// TestThenFuncsRunOutsideTheExclusion: what a done call returns runs
// outside the exclusion that keeps done calls apart, so the embedding's
// work on the pass's own goroutine (a data-parallel stage's table push)
// and a dense layer's on the side lane can run at once. Each of the two
// waits here for the other to start: were the funcs run inside the
// exclusion, the first would wait out its timeout.
func TestThenFuncsRunOutsideTheExclusion(t *testing.T) {
	tr, err := NewTrainer(cpuThreads(t, 2), laneModel(t), 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	src := openData(t, "synthetic:3", data.Options{Vocab: tr.Model.Config.Input.Vocab, Split: data.SplitTrain})
	batch, err := src.Next(context.Background(), 16)
	if err != nil {
		t.Fatal(err)
	}
	s := &Step{Backend: tr.Backend, Batch: batch, Train: true}
	_, dout, err := tr.forwardLoss(s)
	if err != nil {
		t.Fatal(err)
	}
	lowestDense := slices.IndexFunc(iotaInts(tr.Model.NumLayers()), tr.Model.hasDense)
	started := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var met [2]atomic.Bool
	meet := func(me, other int) { // 0: the embedding's func, 1: the dense layer's
		close(started[me])
		select {
		case <-started[other]:
			met[me].Store(true)
		case <-time.After(5 * time.Second):
		}
	}
	_, err = tr.Model.BackwardRangeThen(s, 0, tr.Model.NumLayers()-1, dout, func(i int) func() {
		switch i {
		case 0:
			return func() { meet(0, 1) }
		case lowestDense:
			return func() { meet(1, 0) }
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Model.sideJobs == 0 {
		t.Fatal("no side lane: the test needs the dense layers' done on it")
	}
	if !met[0].Load() || !met[1].Load() {
		t.Fatalf("the embedding's and layer %d's funcs did not run at once (each met the other: %v, %v)", lowestDense, met[0].Load(), met[1].Load())
	}
}

// denseOnly keeps the layers of order that have dense parameters.
func denseOnly(m *Model, order []int) []int {
	var out []int
	for _, i := range order {
		if m.hasDense(i) {
			out = append(out, i)
		}
	}
	return out
}

// sameGrads compares the gradients two runs' done calls saw, layer by
// layer, bit for bit.
func sameGrads(t *testing.T, got, want map[int][][]float32) {
	t.Helper()
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("done saw %d layers, the reference %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if len(g) != len(w) {
			t.Fatalf("layer %d: %d gradients, want %d", i, len(g), len(w))
		}
		for p := range w {
			for j := range w[p] {
				if math.Float32bits(g[p][j]) != math.Float32bits(w[p][j]) {
					t.Fatalf("layer %d param %d [%d] when done ran: %v, serial %v", i, p, j, g[p][j], w[p][j])
				}
			}
		}
	}
}

// TestOneThreadShipsTheEmbeddingBeforeTheWeightGradients: on one thread a
// backward with done defers the weight gradients until the input gradients
// are through, so the layers without dense parameters (embedding, concat)
// are done before any FC layer, the FC layers then from the first up, with
// the gradients the serial order gives.
func TestOneThreadShipsTheEmbeddingBeforeTheWeightGradients(t *testing.T) {
	run := doneRecorder(t, 1)
	m, got, order := run(false)
	_, want, _ := run(true)
	firstDense := slices.IndexFunc(order, m.hasDense)
	if firstDense < 0 || slices.ContainsFunc(order[firstDense:], func(i int) bool { return !m.hasDense(i) }) {
		t.Fatalf("done order %v: want every layer without dense parameters before the first with", order)
	}
	if dense := order[firstDense:]; !slices.IsSorted(dense) {
		t.Fatalf("dense layers done in order %v: want the first layer's first (the next forward reads it first)", dense)
	}
	if m.sideJobs != 4+len(order[firstDense:]) {
		t.Fatalf("the deferred lane ran %d jobs, want the 4 weight gradients and %d done calls", m.sideJobs, len(order[firstDense:]))
	}
	sameGrads(t, got, want)
}

// doneRecorder returns a function that runs one backward of the lane model
// on a fixed batch at the given thread count (serial or not) with a done
// callback, and returns the model, the gradients each done saw (by layer)
// and the order of the calls.
func doneRecorder(t *testing.T, threads int) func(serial bool) (*Model, map[int][][]float32, []int) {
	t.Helper()
	cfg := laneModel(t)
	src := openData(t, "synthetic:3", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	batch, err := src.Next(context.Background(), 16)
	if err != nil {
		t.Fatal(err)
	}
	return func(serial bool) (*Model, map[int][][]float32, []int) {
		tr, err := NewTrainer(cpuThreads(t, threads), cfg, 7, 1)
		if err != nil {
			t.Fatal(err)
		}
		tr.Model.serial = serial
		s := &Step{Backend: tr.Backend, Batch: batch, Train: true}
		_, dout, err := tr.forwardLoss(s)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int][][]float32{}
		var order []int
		_, err = tr.Model.BackwardRangeThen(s, 0, len(tr.Model.entries)-1, dout, func(i int) func() {
			order = append(order, i)
			seen[i] = layerGrads(t, tr.Model, i)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Model, seen, order
	}
}

// TestSideLaneRunsOnItsShareOfPinnedCPUs: with a pinned backend, the side
// lane's work runs on the side share's CPU, not wherever the scheduler
// puts its goroutine.
func TestSideLaneRunsOnItsShareOfPinnedCPUs(t *testing.T) {
	cpus, err := cpuset.Allowed()
	if err != nil || len(cpus) < 2 {
		t.Skipf("pinning needs 2 CPUs: %v, %v", cpus, err)
	}
	be, err := native.NewCPU(native.CPUOptions{Threads: 2, Pin: native.PinAlways})
	if err != nil {
		t.Fatal(err)
	}
	_, side, ok := splitLanes(be)
	if !ok {
		t.Fatal("a 2-thread backend did not split")
	}
	var k laneKeeper
	for pass := range 2 { // the second on the lane kept from the first
		l := k.acquire(side)
		var ranOn []int
		l.submit(func(native.Backend) error {
			ranOn, err = cpuset.Allowed()
			return err
		})
		if _, err := l.wait(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ranOn, cpus[1:2]) {
			t.Errorf("pass %d: the side lane ran on a thread that may use CPUs %v, want %v", pass, ranOn, cpus[1:2])
		}
	}
}

// TestSpinRecvGivesUpAfterItsSpin: spinRecv takes what is sent while it
// spins, reports nothing after its spin, and sees the channel closed.
func TestSpinRecvGivesUpAfterItsSpin(t *testing.T) {
	ch := make(chan int, 1)
	if _, _, ok := spinRecv(ch, time.Millisecond); ok {
		t.Fatal("spinRecv took something from an empty channel")
	}
	go func() {
		time.Sleep(time.Millisecond)
		ch <- 7
	}()
	if v, open, ok := spinRecv(ch, 10*time.Second); v != 7 || !open || !ok {
		t.Fatalf("spinRecv = %d, %v, %v; want 7, true, true", v, open, ok)
	}
	close(ch)
	if _, open, ok := spinRecv(ch, time.Millisecond); open || !ok {
		t.Fatalf("spinRecv on a closed channel: open %v, ok %v", open, ok)
	}
}

// TestKeptLaneRunsEveryPassOnOneGoroutine: a keeper's lane outlives its
// pass (its goroutine, bound to a thread, runs the next pass too), ends
// once idle for laneIdle, and a pass that finds it held gets a lane of its
// own, which ends with that pass.
func TestKeptLaneRunsEveryPassOnOneGoroutine(t *testing.T) {
	_, side, ok := splitLanes(cpuThreads(t, 2))
	if !ok {
		t.Fatal("a 2-thread backend did not split")
	}
	var k laneKeeper
	pass := func(l *lane) string {
		var g string
		l.submit(func(native.Backend) error { g = goroutineID(); return nil })
		if ran, err := l.wait(); ran != 1 || err != nil {
			t.Fatalf("pass ran %d jobs (%v), want 1", ran, err)
		}
		return g
	}
	first := pass(k.acquire(side))
	if second := pass(k.acquire(side)); second != first {
		t.Fatalf("the second pass ran on goroutine %s, the first on %s: the lane was not kept", second, first)
	}
	held := k.acquire(side)
	own := k.acquire(side)
	if own == held || own.kept != nil {
		t.Fatal("a pass that found the kept lane held shared it")
	}
	ownG := pass(own)
	if pass(held) != first {
		t.Fatal("the kept lane changed goroutine")
	}
	deadline := time.Now().Add(10 * time.Second)
	for stillRuns(first) || stillRuns(ownG) {
		if time.Now().After(deadline) {
			t.Fatalf("lane goroutines still run 10 s after their last pass (kept %v, own %v)", stillRuns(first), stillRuns(ownG))
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lane != nil {
		t.Fatal("the keeper still holds the lane whose goroutine ended")
	}
}

// goroutineID is the calling goroutine's number.
func goroutineID() string {
	buf := make([]byte, 64)
	return strings.Fields(string(buf[:runtime.Stack(buf, false)]))[1]
}

// stillRuns reports whether goroutine id is alive.
func stillRuns(id string) bool {
	_, alive := threadtest.GoroutineStack(id)
	return alive
}
