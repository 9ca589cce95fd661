package place

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/native"
)

func cpuDevices(n int) []Device {
	devs := make([]Device, n)
	for i := range devs {
		devs[i] = testDevice("core", 1e10, 1<<30, 1e9)
		devs[i].Kind, devs[i].Threads = "cpu", 1
		devs[i].Name += string(rune('0' + i))
	}
	return devs
}

// alternatingExecutor is an executor of a model's step on two CPU devices,
// its co-location groups placed on them in turn.
func alternatingExecutor(t *testing.T, model string, batch int) (*Graph, *executor) {
	t.Helper()
	g := loadGraph(t, model, batch)
	placement := make([]int, len(g.Ops))
	for i, op := range g.Ops {
		placement[i] = op.Group % 2
	}
	x, err := newExecutor(g, cpuDevices(2), placement, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.close)
	return g, x
}

// TestExecuteRunsOpsAfterTheirInputs: on two devices, every op of a zoo
// model's step runs once, after each of its inputs has run and, from
// another device, been copied over.
func TestExecuteRunsOpsAfterTheirInputs(t *testing.T) {
	g, x := alternatingExecutor(t, "matchnet", 16)
	var mu sync.Mutex
	ran := map[int]bool{}
	for i := range g.Ops {
		x.run[i] = func() error {
			mu.Lock()
			defer mu.Unlock()
			for _, in := range g.Ops[i].Inputs {
				if !ran[in] {
					t.Errorf("%s ran before its input %s", g.Ops[i].Name, g.Ops[in].Name)
				}
			}
			if ran[i] {
				t.Errorf("%s ran twice", g.Ops[i].Name)
			}
			ran[i] = true
			return nil
		}
	}
	if _, err := x.step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(ran) != len(g.Ops) {
		t.Errorf("%d of %d ops ran", len(ran), len(g.Ops))
	}
	if x.moved == 0 || x.transfers == 0 {
		t.Errorf("a placement over two devices copies nothing: %d transfers", x.transfers)
	}
}

// TestExecuteTimesTheRealKernels: a step of mlp-digits over two cores runs
// the kernels and reports each timed step and the bytes copied.
func TestExecuteTimesTheRealKernels(t *testing.T) {
	g := loadGraph(t, "mlp-digits", 32)
	placement := make([]int, len(g.Ops))
	for i, op := range g.Ops {
		placement[i] = op.Group % 2
	}
	out, err := Execute(t.Context(), g, cpuDevices(2), placement, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Steps) != 2 || !(out.Step > 0) || out.Moved == 0 {
		t.Errorf("%+v", out)
	}
}

func TestExecuteRefusesGPUs(t *testing.T) {
	g := loadGraph(t, "mlp-digits", 8)
	devs := cpuDevices(2)
	devs[1].Kind = "gpu"
	if _, err := Execute(t.Context(), g, devs, make([]int, len(g.Ops)), 1); err == nil || !strings.Contains(err.Error(), "only cpu devices") {
		t.Errorf("got %v", err)
	}
}

// TestExecuteOverheadSkipsTheKernels: the overhead steps run no kernel
// and leave the kernels in place for the next step.
func TestExecuteOverheadSkipsTheKernels(t *testing.T) {
	g, x := alternatingExecutor(t, "mlp-digits", 8)
	var mu sync.Mutex
	calls := 0
	for i := range x.run {
		x.run[i] = func() error { mu.Lock(); calls++; mu.Unlock(); return nil }
	}
	sec, err := x.overhead(t.Context(), 2)
	if err != nil || !(sec > 0) || calls != 0 {
		t.Fatalf("overhead %g s, %v, %d kernels ran", sec, err, calls)
	}
	if _, err := x.step(t.Context()); err != nil || calls != len(g.Ops) {
		t.Errorf("after the overhead steps a step ran %d of %d kernels (%v)", calls, len(g.Ops), err)
	}
}

// TestExecutorsShareTheirOpsBuffers: a second executor of the graph given
// the first one's buffers runs every kernel on the same memory.
func TestExecutorsShareTheirOpsBuffers(t *testing.T) {
	g := loadGraph(t, "2emb", 16)
	shared := make(opBuffers, len(g.Ops))
	if _, err := newExecutor(g, cpuDevices(1), make([]int, len(g.Ops)), shared); err != nil {
		t.Fatal(err)
	}
	first := firstFloats(shared)
	if _, err := newExecutor(g, cpuDevices(2), alternating(g), shared); err != nil {
		t.Fatal(err)
	}
	for i, p := range firstFloats(shared) {
		if p != first[i] {
			t.Errorf("op %s: buffer %d is new memory", g.Ops[i/8].Name, i%8)
		}
	}
	if len(first) == 0 {
		t.Fatal("no buffers kept")
	}
}

// firstFloats is the address of every kept buffer's first float, 8 slots
// per op.
func firstFloats(b opBuffers) map[int]*float32 {
	out := map[int]*float32{}
	for i, bufs := range b {
		for k, buf := range bufs {
			if h := buf.(native.HostBuffer); len(h) > 0 {
				out[8*i+k] = &h[0]
			}
		}
	}
	return out
}

func alternating(g *Graph) []int {
	p := make([]int, len(g.Ops))
	for i, op := range g.Ops {
		p[i] = op.Group % 2
	}
	return p
}

// TestCheckPlacementSimulatesWhatItRan: the check measures op times on
// each local device alone, simulates the placement with them and runs it;
// a device set without a local device has nothing to measure on.
func TestCheckPlacementSimulatesWhatItRan(t *testing.T) {
	g := loadGraph(t, "mlp-digits", 16)
	devs := cpuDevices(2)
	devs[0].Local, devs[1].Local = true, true
	c, err := CheckPlacement(t.Context(), g, devs, alternating(g), 2)
	if err != nil {
		t.Fatal(err)
	}
	if !(c.Simulated > 0) || !(c.Executed.Step > 0) || c.Measured.Link == nil || len(c.Measured.ByDevice) != 2 ||
		c.Measured.ByDevice[0] == nil || c.Measured.ByDevice[1] == nil {
		t.Fatalf("simulated %g s, executed %g s, measured %+v", c.Simulated, c.Executed.Step, c.Measured)
	}
	s := newSim(t, g, devs...)
	s.UseMeasured(c.Measured)
	if r := run(t, s, alternating(g)); r.Step != c.Simulated {
		t.Errorf("the check's simulated step %g s, its measurements simulate to %g s", c.Simulated, r.Step)
	}
	devs[0].Local, devs[1].Local = false, false
	if _, err := CheckPlacement(t.Context(), g, devs, alternating(g), 1); err == nil || !strings.Contains(err.Error(), "no device is marked local") {
		t.Errorf("without a local device: %v", err)
	}
}

// TestAFailedStepBreaksTheExecutor: an op's error ends its step with that
// error, and the executor, whose step never finished, refuses the next.
func TestAFailedStepBreaksTheExecutor(t *testing.T) {
	g, x := alternatingExecutor(t, "mlp-digits", 8)
	for i := range x.run {
		x.run[i] = func() error { return nil }
	}
	last := len(g.Ops) / 2
	x.run[last] = func() error { return errors.New("kernel refused") }
	if _, err := x.step(t.Context()); err == nil || !strings.Contains(err.Error(), "kernel refused") || !strings.Contains(err.Error(), g.Ops[last].Name) {
		t.Fatalf("failing op: %v", err)
	}
	x.run[last] = func() error { return nil }
	if _, err := x.step(t.Context()); err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Errorf("the step after a failed one: %v", err)
	}
}

// TestWaitingDevicesSpin: where each device has a CPU of its own, a
// device waiting for an input from the other spins instead of sleeping
// (a core woken from sleep ran its next op slower), and a step wakes
// every device at its start: in a quiet step of a chain alternating
// between two devices, no op reaches a sleeping device; without the
// wake-up the second device's first op does; with spinning off, every op
// does in some step (not in every one: an op can come before its device
// has finished handing on the last).
func TestWaitingDevicesSpin(t *testing.T) {
	if !canSpin(2) {
		t.Skip("fewer than two CPUs or Go processors")
	}
	const hops = 16
	g, placement := hopChain(hops, 0)
	sleeps := func(spin bool) []int64 {
		x, err := newExecutor(g, cpuDevices(2), placement, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range x.run {
			x.run[i] = func() error { return nil }
		}
		x.spin = spin
		ex, err := executeInTurn(t.Context(), 20, 0, x)
		if err != nil {
			t.Fatal(err)
		}
		return ex[0].Sleeps
	}
	spun, slept := slices.Min(sleeps(true)), slices.Max(sleeps(false))
	if spun != 0 || slept < hops-1 {
		t.Errorf("ops of %d hops received asleep: %d in the quietest step spinning, %d at most not", hops, spun, slept)
	}
}

// TestEveryTimedStepFollowsOneOfItsOwn: executors in turn each run an
// untimed step before every timed one, so that a timed step finds the
// caches as its own last step left them, not as the other executor's
// cores did (which made the second core's ops of a placement up to 55%
// slower than alone).
func TestEveryTimedStepFollowsOneOfItsOwn(t *testing.T) {
	g := loadGraph(t, "mlp-digits", 16)
	var xs []*executor
	var order []int
	for k, placement := range [][]int{make([]int, len(g.Ops)), alternating(g)} {
		x, err := newExecutor(g, cpuDevices(2), placement, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, run := range x.run {
			if run != nil {
				x.run[i] = func() error { order = append(order, k); return run() }
				break
			}
		}
		xs = append(xs, x)
	}
	ex, err := executeInTurn(t.Context(), 3, 0, xs...)
	if err != nil {
		t.Fatal(err)
	}
	// rounds of an untimed and a timed step of each (0 0 1 1) x 3; the
	// overheads skip the kernels.
	want := []int{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1}
	if len(ex[0].Steps) != 3 || !slices.Equal(order, want) {
		t.Errorf("%d timed steps, executors ran in the order %v, want %v", len(ex[0].Steps), order, want)
	}
}

// TestAStepEndsWithItsLastOp: the op or copy that finishes a step stamps
// its end, which the step's time is taken from (not the later moment the
// waiting goroutine wakes to see it).
func TestAStepEndsWithItsLastOp(t *testing.T) {
	x := &executor{}
	st := &stepState{finished: make(chan struct{})}
	st.remaining.Store(2)
	x.cur.Store(st)
	x.done()
	if !st.end.IsZero() {
		t.Fatal("a step with work left has an end")
	}
	before := time.Now()
	x.done()
	select {
	case <-st.finished:
	default:
		t.Fatal("the last done did not finish the step")
	}
	if st.end.Before(before) || st.end.After(time.Now()) {
		t.Errorf("end %v, want the moment of the last done (after %v)", st.end, before)
	}
}
