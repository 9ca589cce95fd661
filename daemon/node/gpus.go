package node

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/native"
)

// A node of a GPU type names its GPUs (Config.GPUs, the node file's gpus:
// driver ordinals, one per unit); its stage tasks then run on the CUDA
// backend, one GPU each, and its PS shards on the CPU. It checks them
// against its own inventory before it registers, and the coordinator
// checks them against the catalog's type (daemon/coord's checkNodeGPUs):
// no node trains on its CPU at a GPU type's price.

// errNoCUDA: the binary was built without the CUDA backend.
var errNoCUDA = errors.New("built without CUDA (make build-cuda / -tags cuda)")

// nodeKind is the kind of the node's type as the node knows it: a node that
// names GPUs offers a GPU type (the coordinator holds it to that).
func nodeKind(gpus []int) string {
	if len(gpus) > 0 {
		return config.KindGPU
	}
	return config.KindCPU
}

// checkOwnGPUs checks that the GPUs the node file names are there: a
// binary with the CUDA backend (haveCUDA), a GPU inventory (inv, or the
// error invErr that listing it gave), one GPU per unit, each ordinal
// present.
func checkOwnGPUs(cfg Config, haveCUDA bool, inv []api.GPU, invErr error) error {
	if len(cfg.GPUs) == 0 {
		return nil
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("node %s: its node file's type %q with gpus = %v: %s", cfg.Name, cfg.Type, cfg.GPUs, fmt.Sprintf(format, args...))
	}
	switch {
	case !haveCUDA:
		return fail("this heterps was %v, so it has no GPU to train on", errNoCUDA)
	case invErr != nil:
		return fail("listing the GPUs: %v", invErr)
	case len(inv) == 0:
		return fail("the machine has no GPU the driver lists (no NVIDIA driver or no device)")
	case len(cfg.GPUs) != cfg.Units:
		return fail("%d gpus for %d units (one GPU per unit)", len(cfg.GPUs), cfg.Units)
	}
	for _, d := range cfg.GPUs {
		if d < 0 || d >= len(inv) {
			return fail("GPU %d is not on this machine: the driver lists %d (ordinals 0..%d)", d, len(inv), len(inv)-1)
		}
	}
	return nil
}

// stageBackend is a stage task's backend: for a GPU node the CUDA backend
// on GPU gpu (one of the node's, see gpuPool), for a CPU node the CPU
// backend with units x threads threads. A build without CUDA refuses a GPU
// node's stage (which its registration has refused already). The CPU
// backend's threads are not pinned (native.PinNever), unlike heterps
// train's: the daemon's own goroutines (its parameter-server shards, the
// wire, the input) share the stage's CPUs, and a critical lane pinned to
// one CPU cannot move away from them — make run's job (one 2-thread node)
// ran 92k samples/s pinned against 102-107k unpinned on the 2-core Xeon
// VM, its pinned main lane's CPU idle 23% of the run while the other
// queued; 89-91k with the side lane left free, and 91-93k unpinned at
// GOMAXPROCS 3.
func stageBackend(kind string, gpu, units, threads int) (native.Backend, error) {
	if kind == config.KindGPU {
		b, err := newCUDABackend(gpu)
		if err != nil {
			return nil, fmt.Errorf("stage backend on GPU %d: %w", gpu, err)
		}
		return b, nil
	}
	return native.NewCPU(native.CPUOptions{Threads: units * threads, Pin: native.PinNever})
}

// closeBackend releases a backend that holds resources (a CUDA stream and
// cuBLAS handle); the CPU backend has none.
func closeBackend(b native.Backend) error {
	if c, ok := b.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// gpuPool hands each running stage task one of the node's GPUs.
type gpuPool struct {
	mu   sync.Mutex
	gpus []int        // the node file's, in its order
	busy map[int]bool // by ordinal
}

func newGPUPool(gpus []int) *gpuPool { return &gpuPool{gpus: gpus, busy: map[int]bool{}} }

// acquire returns the first free GPU and the function that frees it, or an
// error when every GPU has a stage (more stage tasks than units: the
// coordinator's next placement frees one).
func (p *gpuPool) acquire() (int, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.gpus {
		if !p.busy[g] {
			p.busy[g] = true
			return g, func() { p.release(g) }, nil
		}
	}
	return 0, nil, fmt.Errorf("all %d GPUs (%v) run a stage already", len(p.gpus), p.gpus)
}

func (p *gpuPool) release(g int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.busy, g)
}
