package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
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
// unpinned.
func TestStageBackendOfACPUNode(t *testing.T) {
	b, err := stageBackend(config.KindCPU, -1, 2, 3)
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
	// Nor is a task with every CPU the daemon may use pinned (see stageBackend).
	b, err = stageBackend(config.KindCPU, -1, 1, runtime.NumCPU())
	if err != nil {
		t.Fatal(err)
	}
	if got := b.(*native.CPU).Pinned(); got != nil {
		t.Errorf("a stage with all %d CPUs pinned to %v", runtime.NumCPU(), got)
	}
}

// A stage of two lanes that waits on other processes runs Go on a P more
// than its lanes until its backend is released (cpuset.Exchanging); one
// that waits on no one, or has one lane, leaves GOMAXPROCS be.
func TestStageBackendKeepsAPForMessages(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("the GOMAXPROCS variable fixes the Ps")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // the Ps two lanes take, on any machine
	const before = 2
	for _, c := range []struct {
		name     string
		threads  int
		replicas int
		want     int
	}{
		{"2 threads, 2 replicas", 2, 2, 3},
		{"2 threads, alone with local shards", 2, 1, before},
		{"1 thread, 2 replicas", 1, 2, before},
	} {
		a := &Agent{cfg: Config{Name: "c1", Type: "cpu-2t", Units: 1, Threads: c.threads}, log: quiet}
		_, release, err := a.stageBackend(api.Task{JobID: "j", TaskID: "j-s0r0", Units: 1, Replicas: c.replicas})
		if err != nil {
			t.Fatal(err)
		}
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("%s: GOMAXPROCS %d while it runs, want %d (%d before)", c.name, got, c.want, before)
		}
		release()
		if got := runtime.GOMAXPROCS(0); got != before {
			t.Errorf("%s: GOMAXPROCS %d after release, want %d as before", c.name, got, before)
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
