package nn

import (
	"slices"
	"sync"
	"time"

	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/internal/doorbell"
	"github.com/heterps/heterps/native"
)

// A lane runs work that nothing later in a pass reads — an FC layer's
// weight gradient during backward, the sparse tables' update beside the
// dense one — on a goroutine of its own, in the order it was queued, with
// its own share of the backend's threads, while the pass goes on. Splitting
// each GEMM across both cores of a 2-core machine gained 0.8-1.8x per
// shape; running the independent GEMMs side by side on one thread each
// keeps every core on a whole GEMM. Work on a lane runs with a fixed share
// of threads, so runs with equal thread counts stay bit-identical.
//
// A deferred lane has no goroutine: its work waits until the pass's
// critical path is done and runs on the pass's own thread, group by group
// from the last group queued to the first (cut ends a group), each group's
// work in order. On one thread that puts a stage's weight gradients after
// its input gradients, so that what the next step waits on longest leaves
// first, and runs the layers' weight gradients from the first layer up:
// the next forward reads the first layer first, and its synchronisation —
// the largest of ctrdnn's, left for last in backward order — then overlaps
// the weight gradients of the layers above (see Model.backward).
type lane struct {
	be    native.Backend
	work  chan func(native.Backend) error // nil on a deferred lane
	queue []func(native.Backend) error    // a deferred lane's work, run by wait
	cuts  []int                           // where the deferred lane's groups start in queue
	err   error                           // the first failure; later work is skipped
	ran   int                             // jobs run, for tests
	// A goroutine lane's doorbells: bell rings with each job queued,
	// passDone once the lane has run a pass's work.
	bell, passDone doorbell.Bell
	kept           *laneKeeper // nil: the lane ends with its pass
}

// splitLanes divides a CPU backend of two or more threads into a main
// share (the pass's critical path) and a side share; other backends (one
// thread, or a GPU, whose stream orders kernels anyway) are not split.
func splitLanes(b native.Backend) (main native.Backend, side *native.CPU, ok bool) {
	cpu, ok := splits(b)
	if !ok {
		return b, nil, false
	}
	main, side = cpu.Split(cpu.Threads() / 2)
	return main, side, true
}

// splits reports whether splitLanes divides b, a CPU backend.
func splits(b native.Backend) (*native.CPU, bool) {
	cpu, isCPU := b.(*native.CPU)
	return cpu, isCPU && CPULanes(cpu.Threads()) > 1
}

// Lanes is how many goroutines run a model's kernels on b at once: two
// where the backward pass splits b into a main and a side lane, else one.
func Lanes(b native.Backend) int {
	if _, ok := splits(b); ok {
		return 2
	}
	return 1
}

// CPULanes is Lanes for a CPU backend of threads threads: two from two
// threads on.
func CPULanes(threads int) int {
	if threads >= 2 {
		return 2
	}
	return 1
}

// laneSpin is how long a lane whose queue ran dry, or a pass waiting for
// its side lane, spins for what it waits on before its thread sleeps.
const laneSpin = time.Millisecond

// laneIdle is how long a kept lane's goroutine waits for work before it
// ends (and with it its thread's binding).
const laneIdle = 100 * time.Millisecond

// A laneKeeper keeps a side lane's goroutine, bound to its thread and the
// thread to the side share's CPUs, from one pass to the next, asleep in
// the kernel between them (doorbell). A lane started for each pass, its
// new goroutine handed to a thread by the Go scheduler, began its first
// job 0.3-1.1 ms after the pass queued it in 3 of 5 traced steps of make
// run's job on the Zen 4 VM (6-8 ms steps) — the thread that does the
// hand-off, woken by the pass's thread, waits behind it — and, whenever
// the side lane is the longer path, the step waited as long.
type laneKeeper struct {
	mu    sync.Mutex
	lane  *lane // the kept lane, nil when none runs
	cpus  []int // its backend's CPUs, nil when not pinned
	width int   // and threads
	inUse bool  // a pass holds lane
}

// keeperOf returns *k, making it first if nil. A keeper lives apart from
// the model or optimiser it serves, so that its lane, which outlives their
// last pass by up to laneIdle, does not keep them in memory.
func keeperOf(k **laneKeeper) *laneKeeper {
	if *k == nil {
		*k = &laneKeeper{}
	}
	return *k
}

// acquire returns the kept lane for side, starting one when none runs or
// the one running has other CPUs; a pass that finds the kept lane held
// gets a lane of its own, which ends with the pass.
func (k *laneKeeper) acquire(side *native.CPU) *lane {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.inUse {
		return startLane(side, nil)
	}
	if k.lane != nil && (k.width != side.Threads() || !slices.Equal(k.cpus, side.Pinned())) {
		k.lane.end()
		k.lane = nil
	}
	if k.lane == nil {
		k.lane = startLane(side, k)
		k.cpus, k.width = slices.Clone(side.Pinned()), side.Threads()
	}
	k.inUse = true
	return k.lane
}

// release ends a pass's hold on l.
func (k *laneKeeper) release(l *lane) {
	if k == nil {
		l.end() // a pass's own lane ends with it
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.inUse = false
}

// retire forgets l when it is idle, unless a pass holds it, and reports
// whether l's goroutine should end. A pass's own lane (no keeper) idle in
// its pass goes on waiting: its pass ends it.
func (k *laneKeeper) retire(l *lane) bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lane != l {
		return true
	}
	if k.inUse {
		return false
	}
	k.lane = nil
	return true
}

// startLane starts a lane on be, kept by k (nil: one pass's); its owner
// calls wait.
func startLane(be *native.CPU, k *laneKeeper) *lane {
	l := &lane{be: be, work: make(chan func(native.Backend) error, 16), kept: k}
	go l.run()
	return l
}

// end closes l's queue, which ends its goroutine.
func (l *lane) end() {
	close(l.work)
	l.bell.Ring()
}

// run runs the lane's passes: each job in turn, and a nil job (wait's) by
// saying the pass is done. It ends when the queue is closed or, on a kept
// lane, when it has been idle for laneIdle and its keeper lets it go.
func (l *lane) run() {
	defer l.be.(*native.CPU).PinCaller()() // on the side share's CPUs when pinned
	spin := laneSpin
	for {
		fn, open, idle := l.next(spin)
		spin = laneSpin
		switch {
		case !open:
			return
		case idle:
			if l.kept.retire(l) {
				return
			}
		case fn == nil:
			l.passDone.Ring()
			spin = 0 // the next pass is a forward away: sleep at once
		case l.err == nil:
			l.err = fn(l.be)
			l.ran++
		}
	}
}

// next returns the lane's next job, or false once the queue is closed, or
// idle after laneIdle without one. A lane whose queue ran dry in a pass
// spins for up to spin before its thread sleeps: asleep, it began its next
// job 0.3-1 ms after the pass queued it in traced steps of make run's job,
// woken through the Go scheduler; spinning a little, as OpenMP's threads
// and the kernels' pool helpers do, turns that into microseconds. Between
// passes it sleeps at once (a spin would take a core from the forward's
// split kernels), and the doorbell wakes its thread directly.
func (l *lane) next(spin time.Duration) (fn func(native.Backend) error, open, idle bool) {
	if fn, open, ok := spinRecv(l.work, spin); ok {
		return fn, open, false
	}
	for timedOut := false; ; timedOut = !l.bell.Wait(laneIdle) {
		select {
		case fn, open := <-l.work:
			return fn, open, false
		default:
		}
		if timedOut {
			return nil, true, true
		}
	}
}

// spinRecv receives from ch, spinning for up to d; ok is false when
// nothing came.
func spinRecv[T any](ch <-chan T, d time.Duration) (v T, open, ok bool) {
	ok = spinUntil(d, func() bool {
		select {
		case v, open = <-ch:
			return true
		default:
			return false
		}
	})
	return v, open, ok
}

// spinWait waits for b to ring, spinning for up to d before it sleeps.
func spinWait(b *doorbell.Bell, d time.Duration) {
	if !spinUntil(d, b.Rung) {
		b.Wait(0)
	}
}

// spinUntil polls done until it reports true or d has passed, offering its
// CPU to any other thread runnable there now and then (so a spin on a
// shared core costs its other tenants little), and reports whether done
// did.
func spinUntil(d time.Duration, done func() bool) bool {
	start := time.Now()
	for i := 1; ; i++ {
		if done() {
			return true
		}
		if i%64 == 0 {
			if time.Since(start) >= d {
				return false
			}
			cpuset.Yield()
		}
	}
}

// deferLane makes a deferred lane on be; its owner calls wait.
func deferLane(be native.Backend) *lane { return &lane{be: be} }

func (l *lane) submit(fn func(native.Backend) error) {
	if l.work == nil {
		l.queue = append(l.queue, fn)
		return
	}
	l.work <- fn
	l.bell.Ring()
}

// cut ends a deferred lane's current group of work; nothing otherwise.
func (l *lane) cut() {
	if l.work == nil && (len(l.cuts) == 0 || l.cuts[len(l.cuts)-1] < len(l.queue)) {
		l.cuts = append(l.cuts, len(l.queue))
	}
}

// wait returns when all queued work has run, with how many jobs ran and
// the first error; a goroutine lane is then free for its next pass.
func (l *lane) wait() (ran int, err error) {
	if l.work == nil {
		l.cut()
		for g := len(l.cuts) - 1; g >= 0; g-- {
			lo := 0
			if g > 0 {
				lo = l.cuts[g-1]
			}
			for _, fn := range l.queue[lo:l.cuts[g]] {
				if l.err == nil {
					l.err = fn(l.be)
					l.ran++
				}
			}
		}
		l.queue, l.cuts = nil, nil
		return l.ran, l.err
	}
	l.submit(nil) // the pass's end
	spinWait(&l.passDone, laneSpin)
	ran, err = l.ran, l.err
	l.ran, l.err = 0, nil
	l.kept.release(l)
	return ran, err
}

// offPath runs fn on the step's side lane when it has one, else now on
// the step's backend.
func (s *Step) offPath(fn func(native.Backend) error) error {
	if s.side == nil {
		return fn(s.Backend)
	}
	s.side.submit(fn)
	return nil
}
