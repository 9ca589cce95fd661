package place

import (
	"strings"
	"sync"
	"testing"
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
	x, err := newExecutor(g, cpuDevices(2), placement)
	if err != nil {
		t.Fatal(err)
	}
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
