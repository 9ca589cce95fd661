package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/native"
)

// Each way a node's own GPUs can fail its node file is refused, naming the
// node, its type, its gpus and what is missing; a CPU node is not checked.
func TestCheckOwnGPUs(t *testing.T) {
	gpu := func(units int, gpus ...int) Config { return Config{Name: "g1", Type: "v100", Units: units, GPUs: gpus} }
	two := []api.GPU{{Name: "Tesla V100-PCIE-32GB"}, {Name: "Tesla V100-PCIE-32GB"}}
	for _, tc := range []struct {
		name     string
		cfg      Config
		haveCUDA bool
		inv      []api.GPU
		invErr   error
		want     string // "" = accepted
	}{
		{"cpu node", Config{Name: "c1", Type: "cpu", Units: 2}, false, nil, nil, ""},
		{"backed", gpu(2, 1, 0), true, two, nil, ""},
		{"built without cuda", gpu(1, 0), false, two, nil, "built without CUDA (make build-cuda / -tags cuda)"},
		{"no driver", gpu(1, 0), true, nil, nil, "no GPU the driver lists"},
		{"inventory failed", gpu(1, 0), true, nil, errors.New("cuInit: 999"), "listing the GPUs: cuInit: 999"},
		{"fewer gpus than units", gpu(2, 0), true, two, nil, "1 gpus for 2 units"},
		{"ordinal absent", gpu(2, 0, 2), true, two, nil, "GPU 2 is not on this machine: the driver lists 2"},
		{"more gpus named than the machine has", gpu(3, 0, 1, 2), true, two, nil, "GPU 2 is not on this machine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkOwnGPUs(tc.cfg, tc.haveCUDA, tc.inv, tc.invErr)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("accepted, want a refusal saying %q", tc.want)
			case tc.want != "" && (!strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), `node g1: its node file's type "v100" with gpus = [`)):
				t.Errorf("refused with %q, want it to name the node, type and gpus, and %q", err, tc.want)
			}
		})
	}
}

// A node whose node file names GPUs its inventory lacks (here, a fake
// device list: none) ends Run with the reason and never asks the
// coordinator to register it.
func TestGPUNodeWithoutGPUsRefusesToRegister(t *testing.T) {
	saved := gpuInventory
	t.Cleanup(func() { gpuInventory = saved })
	gpuInventory = func() ([]api.GPU, error) { return nil, nil }
	var asked atomic.Int32
	coordinator := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "unexpected", http.StatusTeapot)
	}))
	defer coordinator.Close()
	a, err := New(Config{Name: "g1", Coordinator: coordinator.URL, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: "v100", Units: 1, GPUs: []int{0}, Plain: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background())
	want := "no GPU the driver lists"
	if !cudaBuild {
		want = "built without CUDA"
	}
	if err == nil || !strings.Contains(err.Error(), "refusing to register") || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), `type "v100" with gpus = [0]`) {
		t.Errorf("Run: %v, want a refusal to register saying %q", err, want)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the node sent the coordinator %d requests", n)
	}
}

// A CPU node's stages run on the CPU backend with units x threads threads,
// pinned as asked.
func TestStageBackendOfACPUNode(t *testing.T) {
	b, err := stageBackend(config.KindCPU, -1, 2, 3, native.PinNever)
	if err != nil {
		t.Fatal(err)
	}
	cpu, ok := b.(*native.CPU)
	if !ok || cpu.Threads() != 6 {
		t.Errorf("backend %T %s, want the CPU backend with 6 threads", b, b.Name())
	}
	if closeBackend(b) != nil {
		t.Error("closing the CPU backend failed")
	}
	for _, pin := range []native.Pinning{native.PinNever, native.PinAuto} {
		b, err = stageBackend(config.KindCPU, -1, 1, runtime.NumCPU(), pin)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := b.(*native.CPU).Pinned() != nil, pin == native.PinAuto; got != want {
			t.Errorf("%s: a stage with all %d CPUs pinned to %v", pin, runtime.NumCPU(), b.(*native.CPU).Pinned())
		}
	}
}

// A stage task pins its threads when it waits on no other process and
// takes the whole node (see Pinning); a replica of several, a stage of
// several, one whose servers live elsewhere and one that leaves units to
// other tasks run unpinned.
func TestStagePinning(t *testing.T) {
	a := &Agent{cfg: Config{Name: "n", Units: 1, Threads: 2}, psAddr: "127.0.0.1:7000"}
	alone := api.Task{Units: 1, Replicas: 1, PS: []string{"127.0.0.1:7000"}}
	if got := a.stagePinning(alone); got != native.PinAuto {
		t.Errorf("a sole local replica taking the node: %s, want auto", got)
	}
	replicas, remote := alone, alone
	replicas.Replicas = 2
	remote.PS = []string{"127.0.0.1:7000", "10.0.0.2:7000"}
	for name, s := range map[string]api.Task{"one of 2 replicas": replicas, "servers elsewhere": remote} {
		if got := a.stagePinning(s); got != native.PinNever {
			t.Errorf("%s: %s, want never", name, got)
		}
	}
	a.cfg.Units = 2
	if got := a.stagePinning(alone); got != native.PinNever {
		t.Errorf("a task taking 1 of the node's 2 units: %s, want never", got)
	}
}

// A pinned stage's compute thread runs on the first of its backend's CPUs
// until the task undoes it; an unpinned one's stays where it may run.
func TestComputeThreadOnThePinnedBackendsFirstCPU(t *testing.T) {
	a := &Agent{cfg: Config{Name: "n"}, log: quiet}
	for _, pin := range []native.Pinning{native.PinAuto, native.PinNever} {
		b, err := stageBackend(config.KindCPU, -1, 1, runtime.NumCPU(), pin)
		if err != nil {
			t.Fatal(err)
		}
		var before, during, after []int
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // as runStage's goroutine is
			before, _ = cpuset.Allowed()
			undo := a.pinComputeThread(api.Task{JobID: "j", TaskID: "j.s0.r0"}, b)
			during, _ = cpuset.Allowed()
			undo()
			after, _ = cpuset.Allowed()
		}()
		<-done
		want := before
		if pin == native.PinAuto {
			want = b.(*native.CPU).Pinned()[:1]
		}
		if !slices.Equal(during, want) || !slices.Equal(after, before) {
			t.Errorf("%s: the compute thread on CPUs %v, then %v; want %v, then %v", pin, during, after, want, before)
		}
	}
}

// Without CUDA a GPU node's stage cannot start (it must not fall back to
// the CPU), and the GPU it took is free again.
func TestGPUStageWithoutCUDAIsRefused(t *testing.T) {
	if cudaBuild {
		t.Skip("a CUDA build: the GPU path needs a GPU (bench/gpu)")
	}
	a := &Agent{cfg: Config{Name: "g1", Type: "v100", Units: 1, Threads: 1, GPUs: []int{3}}, gpus: newGPUPool([]int{3}), log: quiet}
	b, release, err := a.stageBackend(api.Task{JobID: "j", TaskID: "j-s0r0", Units: 1})
	if !errors.Is(err, errNoCUDA) || b != nil || release != nil {
		t.Fatalf("stageBackend: %v, %v; want errNoCUDA and no backend", b, err)
	}
	if !strings.Contains(err.Error(), "GPU 3") {
		t.Errorf("%v: want the GPU named", err)
	}
	g, free, err := a.gpus.acquire()
	if err != nil || g != 3 {
		t.Fatalf("after the refusal, acquire = %d, %v; want GPU 3 free", g, err)
	}
	free()
}

// Each stage task gets its own GPU, in the node file's order, back when it
// ends; more tasks than GPUs are refused.
func TestGPUPool(t *testing.T) {
	p := newGPUPool([]int{2, 0})
	g1, free1, err1 := p.acquire()
	g2, free2, err2 := p.acquire()
	if err1 != nil || err2 != nil || g1 != 2 || g2 != 0 {
		t.Fatalf("acquired %d (%v), %d (%v); want 2 then 0", g1, err1, g2, err2)
	}
	if _, _, err := p.acquire(); err == nil || !strings.Contains(err.Error(), "all 2 GPUs") {
		t.Errorf("a third stage: %v, want a refusal", err)
	}
	free1()
	if g, free, err := p.acquire(); err != nil || g != 2 {
		t.Errorf("after a release: %d, %v; want 2", g, err)
	} else {
		free()
	}
	free2()
}
