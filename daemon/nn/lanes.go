package nn

import (
	"time"

	"github.com/heterps/heterps/internal/cpuset"
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
	done  chan struct{}
	err   error // the first failure; later work is skipped
	ran   int   // jobs run, for tests
}

// splitLanes divides a CPU backend of two or more threads into a main
// share (the pass's critical path) and a side share; other backends (one
// thread, or a GPU, whose stream orders kernels anyway) are not split.
func splitLanes(b native.Backend) (main, side native.Backend, ok bool) {
	cpu, isCPU := b.(*native.CPU)
	if !isCPU || cpu.Threads() < 2 {
		return b, nil, false
	}
	main, side = cpu.Split(cpu.Threads() / 2)
	return main, side, true
}

// startLane starts a lane on be; its owner calls wait.
func startLane(be native.Backend) *lane {
	l := &lane{be: be, work: make(chan func(native.Backend) error, 16), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *lane) run() {
	defer close(l.done)
	if cpu, ok := l.be.(*native.CPU); ok {
		defer cpu.PinCaller()() // on the side share's CPUs when pinned
	}
	for {
		fn, open := l.next()
		if !open {
			return
		}
		if l.err == nil {
			l.err = fn(l.be)
			l.ran++
		}
	}
}

// laneSpin is how long a lane whose queue ran dry, or a pass waiting for
// its side lane, spins for what it waits on before its goroutine sleeps.
const laneSpin = time.Millisecond

// next returns the lane's next job, or false once wait has closed the
// queue. A sleeping lane, its goroutine bound to a thread, began its next
// job 0.3-1 ms after the pass queued it (in 2 of 4 steps traced of make
// run's job on the Zen 4 VM, 8 ms each), and a pass woke 0.25-0.5 ms after
// the lane it waited on was done: the hand-off of a bound goroutine to its
// thread waits behind whatever runs where the kernel wakes the thread that
// does it. Spinning a little, as OpenMP's threads and the kernels' pool
// helpers do, turns those into microseconds.
func (l *lane) next() (func(native.Backend) error, bool) {
	return spinRecv(l.work, laneSpin)
}

// spinRecv receives from ch, spinning for up to d before it blocks, and
// offering its CPU to any other thread runnable there now and then (so a
// spin on a shared core costs its other tenants little).
func spinRecv[T any](ch <-chan T, d time.Duration) (T, bool) {
	start := time.Now()
	for i := 1; ; i++ {
		select {
		case v, open := <-ch:
			return v, open
		default:
		}
		if i%64 != 0 {
			continue
		}
		if time.Since(start) >= d {
			v, open := <-ch
			return v, open
		}
		cpuset.Yield()
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
}

// cut ends a deferred lane's current group of work; nothing otherwise.
func (l *lane) cut() {
	if l.work == nil && (len(l.cuts) == 0 || l.cuts[len(l.cuts)-1] < len(l.queue)) {
		l.cuts = append(l.cuts, len(l.queue))
	}
}

// wait returns when all queued work has run, with the first error.
func (l *lane) wait() error {
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
		return l.err
	}
	close(l.work)
	spinRecv(l.done, laneSpin)
	return l.err
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
