// Package gctune keeps Go's garbage collector from running many times a
// second in a process whose live heap is small but which allocates fast.
//
// The collector's goal is live × (1 + GOGC/100): a node daemon holding 30 MB
// of live heap and allocating 400 MB/s of step buffers (batches, row
// copies, id maps) collects about 15 times a second at GOGC = 100, and
// about 4 times with 64 MiB of headroom. Run sets
// the percentage so that the goal is at least live + headroom — a floor on
// the collector's slack, as a ballast would give, without one — and back to
// 100 once the live heap exceeds the headroom, so the process never holds
// more than headroom bytes of garbage beyond what GOGC = 100 allows.
package gctune

import (
	"context"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// DefaultHeadroom is the slack Run keeps by default. Measured on a 2-core
// Zen 5 VM with alternated pairs: make run's job (one node, ~30 MB live,
// 400 MB/s) trained 123.8k samples/s with 64 MiB against 112.0k without (4
// of 4 faster) and 121.5k with 256 MiB; four 1-thread nodes on the same 2
// cores were 12 % slower with 64 MiB and 11 % with 256, their heaps taking
// ten times the page faults — so heterpsd keeps it for a node alone on its
// machine, and the slack is kept small.
const DefaultHeadroom = 64 << 20

// NodeHeadroom is the slack for a node whose units run threads threads in
// all on a machine of cpus CPUs: DefaultHeadroom when they cover the
// machine, none when the node shares it with others.
func NodeHeadroom(threads, cpus int) uint64 {
	if threads >= cpus {
		return DefaultHeadroom
	}
	return 0
}

// maxPercent bounds the percentage for a nearly empty heap.
const maxPercent = 10_000

// Percent is the GOGC percentage whose goal, live × (1 + p/100), is live +
// headroom when live is below headroom, and 100 (GOGC's default) when not.
func Percent(live, headroom uint64) int {
	if live == 0 {
		return maxPercent
	}
	p := uint64(math.Ceil(float64(headroom) * 100 / float64(live)))
	return int(min(max(p, 100), maxPercent))
}

// running holds the one Run a process may have at a time (the percentage
// is the process's).
var running atomic.Bool

// Run sets the percentage (Percent) now and again after every collection,
// from the live heap that collection found, until ctx ends; it then
// restores the percentage it found. Re-deciding at every cycle, not on a
// timer, keeps a heap that grows fast (a node restoring a large table)
// from running on a percentage set for a small one. It does nothing when
// headroom is 0, when gogcSet (the GOGC environment variable is the
// operator's choice), or while another Run is under way in the process (a
// coordinator and a node in one test binary).
func Run(ctx context.Context, headroom uint64, gogcSet bool) {
	if headroom == 0 || gogcSet || !running.CompareAndSwap(false, true) {
		return
	}
	defer running.Store(false)
	t := &tuner{headroom: headroom, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.mu.Lock()
	t.found = debug.SetGCPercent(100)
	t.current = 100
	t.adjust()
	t.mu.Unlock()
	t.arm()
	<-ctx.Done()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	debug.SetGCPercent(t.found)
}

// Start runs Run in its own goroutine with the operator's GOGC, if the
// environment sets it, winning, until the returned stop is called; stop
// waits for Run to restore the percentage.
func Start(ctx context.Context, headroom uint64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	_, gogcSet := os.LookupEnv("GOGC")
	var wg sync.WaitGroup
	wg.Go(func() { Run(ctx, headroom, gogcSet) })
	return func() { cancel(); wg.Wait() }
}

// tuner is one Run's state, shared with the finalizer goroutine.
type tuner struct {
	headroom uint64
	mu       sync.Mutex
	sample   []metrics.Sample
	found    int  // the percentage before Run
	current  int  // the percentage Run set last
	stopped  bool // Run has ended: arm no more
}

// cycle is a sentinel whose finalizer runs once a collection has found it
// unreachable: once a cycle. It holds a pointer, so it is never one of the
// tiny allocations whose finalizers may not run.
type cycle struct{ t *tuner }

func (t *tuner) arm() {
	runtime.SetFinalizer(&cycle{t: t}, func(c *cycle) { c.t.afterGC() })
}

func (t *tuner) afterGC() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.adjust()
	t.arm()
}

// adjust sets the percentage for the live heap when it moved by more than
// a tenth. Under mu.
func (t *tuner) adjust() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	if p := Percent(t.sample[0].Value.Uint64(), t.headroom); moved(t.current, p) {
		debug.SetGCPercent(p)
		t.current = p
	}
}

// moved reports whether percentage p differs from cur by more than a tenth.
func moved(cur, p int) bool {
	return p*10 > cur*11 || p*11 < cur*10
}
