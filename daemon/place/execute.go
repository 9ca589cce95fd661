package place

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/native"
)

// Executed is a placement's step run for real on this machine's CPU.
type Executed struct {
	Step  float64   // the fastest step, seconds
	Steps []float64 // every timed step, seconds
	Moved int64     // bytes copied between devices per step
	// OpSeconds is each op's fastest time over the timed steps, as it ran
	// inside the step (its inputs as the ops before left the caches).
	OpSeconds []float64
	// Overhead is the fastest step with every kernel skipped: what handing
	// the ops between goroutines and copying outputs between devices cost.
	Overhead float64
	// Sleeps is, per timed step, how many of its ops a device's goroutine
	// received asleep (0 where every wait spun).
	Sleeps []int64
}

// Execute runs the step of g under placement for real, reps times after
// one warm-up, on this machine's CPU: each device is a native CPU backend
// of its Threads whose ops run on a goroutine of its own, locked to a
// thread pinned to a CPU of its own (device d on the d-th CPU this process
// may use, modulo their number), in the order they become ready (their
// kernels as Measure times them, on buffers of their own); an output that
// a consumer on another device needs is copied there, once per device, by
// the producer's goroutine right after the op (one copy at a time, as the
// simulator's local links), and so are the updates' new weights for the
// next step's readers (Op.NextStep). A waiting goroutine spins while its
// step runs (up to maxSpin) where every device has a CPU of its own. A
// step ends when every op and copy is done. Only cpu devices can execute
// here.
func Execute(ctx context.Context, g *Graph, devs []Device, placement []int, reps int) (*Executed, error) {
	x, err := newExecutor(g, devs, placement, nil)
	if err != nil {
		return nil, err
	}
	ex, err := executeInTurn(ctx, reps, 0, x)
	if err != nil {
		return nil, err
	}
	return ex[0], nil
}

// maxRoundsPerRep bounds executeInTurn's rounds beyond reps.
const maxRoundsPerRep = 100

// executeInTurn runs rounds of one timed step of each executor in turn
// (timedStep), so that all of them see the same load of a shared machine —
// reps rounds, and more until minTime has passed, at most maxRoundsPerRep
// per rep — then each one's overhead; it returns their Executed in order
// and stops their workers.
func executeInTurn(ctx context.Context, reps int, minTime time.Duration, xs ...*executor) ([]*Executed, error) {
	defer func() {
		for _, x := range xs {
			x.close()
		}
	}()
	reps = max(reps, 1)
	out := make([]*Executed, len(xs))
	for k, x := range xs {
		out[k] = &Executed{Step: math.Inf(1), Moved: x.moved, OpSeconds: make([]float64, len(x.g.Ops))}
		for i := range out[k].OpSeconds {
			out[k].OpSeconds[i] = math.Inf(1)
		}
	}
	start := time.Now()
	for round := 0; round < reps || (time.Since(start) < minTime && round < maxRoundsPerRep*reps); round++ {
		for k, x := range xs {
			sec, err := x.timedStep(ctx)
			if err != nil {
				return nil, err
			}
			ex := out[k]
			ex.Steps, ex.Sleeps = append(ex.Steps, sec), append(ex.Sleeps, x.sleeps.Load())
			for i, t := range x.opTime {
				ex.OpSeconds[i] = math.Min(ex.OpSeconds[i], t)
			}
			ex.Step = math.Min(ex.Step, sec)
		}
	}
	for k, x := range xs {
		var err error
		if out[k].Overhead, err = x.overhead(ctx, reps); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// timedStep runs an untimed step and then a timed one, the garbage
// collected before each, and returns the timed one's time (its sleeps in
// x.sleeps).
//
// The untimed step: executors of one graph share its ops' buffers, and it
// leaves them in the caches of the cores this executor runs each op on, as
// its steady state would (after another executor ran an op on the other
// core, a placement's ops on that core took up to 55 % longer than alone);
// the first one also pages the buffers in. The collections: a collection's
// mark workers take a core from a device, and without one a step's
// allocations (an embedding gradient's result) fault in fresh pages (up to
// 40 % of a small step here), which a trainer's steady state reuses.
func (x *executor) timedStep(ctx context.Context) (float64, error) {
	runtime.GC()
	if _, err := x.step(ctx); err != nil {
		return 0, err
	}
	runtime.GC()
	x.sleeps.Store(0)
	return x.step(ctx)
}

// overhead is the fastest of reps steps run without the kernels.
func (x *executor) overhead(ctx context.Context, reps int) (float64, error) {
	runs := x.run
	x.run = make([]func() error, len(runs))
	defer func() { x.run = runs }()
	best := math.Inf(1)
	for range reps {
		sec, err := x.step(ctx)
		if err != nil {
			return 0, err
		}
		best = math.Min(best, sec)
	}
	return best, nil
}

// copyTo is one transfer of an op's output to another device: the ops
// there that wait for it.
type copyTo struct {
	to        int // the consumers' device
	src, dst  []float32
	consumers []int
}

type executor struct {
	g         *Graph
	placement []int
	devs      int
	cpus      []int          // per device: the CPU (among those this process may use) its goroutine is pinned to
	run       []func() error // per op; nil for the input
	local     [][]int        // per op: consumers on its own device
	copies    [][]*copyTo    // per op: its transfers
	transfers int
	moved     int64
	opTime    []float64 // the last step's, per op (each written by its device's goroutine)

	// the workers (start, close) and the step they work on
	ready   []chan int // per device: its ops that are ready
	spin    bool       // whether waiting workers spin (each device has a CPU of its own)
	stop    chan struct{}
	workers sync.WaitGroup
	cur     atomic.Pointer[stepState]
	sleeps  atomic.Int64 // ops received asleep in the current step
	broken  error        // why no further step can run
}

// opBuffers holds each op's kernel buffers, so that executors of one
// graph that take turns (CheckPlacement's) run each kernel on the same
// memory: where a buffer lands (huge pages or not, which cache sets)
// changes an op's time by up to 2x on this machine's embedding gathers.
type opBuffers [][]native.Buffer

// sharedAlloc is a backend whose Alloc hands out one op's buffers from
// an opBuffers in order, allocating (and keeping) those it lacks.
type sharedAlloc struct {
	native.Backend
	bufs *[]native.Buffer
	next int
}

func (s *sharedAlloc) Alloc(n int) native.Buffer {
	defer func() { s.next++ }()
	if s.next < len(*s.bufs) && (*s.bufs)[s.next].Len() == n {
		return (*s.bufs)[s.next]
	}
	b := s.Backend.Alloc(n)
	*s.bufs = append((*s.bufs)[:s.next], b)
	return b
}

// newExecutor prepares g's step under placement on devs, each op's
// kernel on buffers of its own (from shared when it is not nil).
func newExecutor(g *Graph, devs []Device, placement []int, shared opBuffers) (*executor, error) {
	if len(placement) != len(g.Ops) {
		return nil, fmt.Errorf("place: execute %s: placement has %d devices for %d ops", g.Name, len(placement), len(g.Ops))
	}
	bes := make([]native.Backend, len(devs))
	for d, dev := range devs {
		if dev.Kind != "cpu" {
			return nil, fmt.Errorf("place: execute %s: device %s is a %s; only cpu devices execute on this machine", g.Name, dev.Name, dev.Kind)
		}
		be, err := native.NewCPU(native.CPUOptions{Threads: max(dev.Threads, 1)})
		if err != nil {
			return nil, fmt.Errorf("place: execute %s: device %s: %w", g.Name, dev.Name, err)
		}
		bes[d] = be
	}
	n := len(g.Ops)
	x := &executor{g: g, placement: placement, devs: len(devs), spin: canSpin(len(devs)), cpus: make([]int, len(devs)), run: make([]func() error, n),
		local: make([][]int, n), copies: make([][]*copyTo, n), opTime: make([]float64, n)}
	for d := range x.cpus {
		x.cpus[d] = d
	}
	for i, op := range g.Ops {
		d := placement[i]
		if d < 0 || d >= len(devs) {
			return nil, fmt.Errorf("place: execute %s: op %d (%s) placed on device %d of %d", g.Name, i, op.Name, d, len(devs))
		}
		if op.Kind == KindInput {
			continue
		}
		be := bes[d]
		if shared != nil {
			be = &sharedAlloc{Backend: be, bufs: &shared[i]}
		}
		run, err := kernelOf(be, op)
		if err != nil {
			return nil, fmt.Errorf("place: execute %s: op %d (%s): %w", g.Name, i, op.Name, err)
		}
		if run == nil {
			return nil, fmt.Errorf("place: execute %s: op %d (%s, %s %v) has no kernel here or is too large to run", g.Name, i, op.Name, op.Kind, op.Dims)
		}
		x.run[i] = run
	}
	for w, op := range g.Ops {
		for _, v := range op.Inputs {
			x.consume(v, w)
		}
	}
	for v, op := range g.Ops {
		for _, w := range op.NextStep {
			if w < 0 || w >= n {
				return nil, fmt.Errorf("place: execute %s: op %d (%s) feeds op %d of %d", g.Name, v, op.Name, w, n)
			}
			x.copyOf(v, placement[w]) // no consumer waits in this step
		}
	}
	return x, nil
}

// consume records that op w reads op v's output.
func (x *executor) consume(v, w int) {
	if x.placement[v] == x.placement[w] {
		x.local[v] = append(x.local[v], w)
		return
	}
	c := x.copyOf(v, x.placement[w])
	c.consumers = append(c.consumers, w)
}

// copyOf is the transfer of op v's output to device d, made on first use.
func (x *executor) copyOf(v, d int) *copyTo {
	for _, c := range x.copies[v] {
		if c.to == d {
			return c
		}
	}
	if x.placement[v] == d {
		return &copyTo{} // the output is there already
	}
	floats := int(x.g.Ops[v].Out / 4)
	c := &copyTo{to: d, src: make([]float32, floats), dst: make([]float32, floats)}
	x.copies[v] = append(x.copies[v], c)
	x.transfers++
	x.moved += x.g.Ops[v].Out
	return c
}

// stepState is one step's progress, shared by the workers.
type stepState struct {
	pending   []atomic.Int32 // per op: inputs not yet on its device
	remaining atomic.Int64   // ops and copies not yet done
	finished  chan struct{}  // closed when the last is done, at end
	end       time.Time
	failed    chan error
}

// start launches the executor's workers, once: per device one goroutine
// running its ops and making its transfers, locked to a thread pinned to
// the device's CPU. They live until close, so that a step pays neither
// their start nor the pinning.
func (x *executor) start() {
	if x.ready != nil {
		return
	}
	x.ready, x.stop = make([]chan int, x.devs), make(chan struct{})
	n := len(x.g.Ops)
	for d := range x.devs {
		x.ready[d] = make(chan int, n+1)
		x.workers.Go(func() {
			defer cpuset.LockToCPU(x.cpus[d])()
			x.device(d)
		})
	}
}

// canSpin says whether devs workers may spin while they wait: only when
// each has a CPU and a Go processor of its own, or a spinning worker
// would hold up another.
func canSpin(devs int) bool {
	return devs <= runtime.GOMAXPROCS(0) && devs <= runtime.NumCPU()
}

// close stops the workers.
func (x *executor) close() {
	if x.ready != nil {
		close(x.stop)
		x.workers.Wait()
		x.ready = nil
	}
}

// step runs one step and returns its wall time, from its start to the
// end of its last op or copy. A step that fails or is
// cancelled leaves ops of its own in flight: the executor refuses further
// steps.
func (x *executor) step(ctx context.Context) (float64, error) {
	if x.broken != nil {
		return 0, x.broken
	}
	x.start()
	n := len(x.g.Ops)
	st := &stepState{pending: make([]atomic.Int32, n), finished: make(chan struct{}), failed: make(chan error, 1)}
	for i, op := range x.g.Ops {
		st.pending[i].Store(int32(len(op.Inputs)))
	}
	st.remaining.Store(int64(n + x.transfers))
	x.cur.Store(st)
	start := time.Now()
	if x.spin { // sleeping devices wake now, not when their first input comes
		for d := range x.devs {
			x.ready[d] <- wake
		}
	}
	for i, op := range x.g.Ops {
		if len(op.Inputs) == 0 {
			x.ready[x.placement[i]] <- i
		}
	}
	select {
	case <-st.finished:
		// The step ended with its last op or copy, not when this
		// goroutine woke to see it: that wake-up is the harness's.
		return st.end.Sub(start).Seconds(), nil
	case err := <-st.failed:
		return 0, x.breakOn(err)
	case <-ctx.Done():
		return 0, x.breakOn(ctx.Err())
	}
}

// breakOn refuses the executor's further steps after a step that did not
// finish because of err, and returns err.
func (x *executor) breakOn(err error) error {
	x.broken = fmt.Errorf("place: execute %s: an earlier step did not finish: %w", x.g.Name, err)
	return err
}

// done counts an op or a copy of the current step as done.
func (x *executor) done() {
	if st := x.cur.Load(); st.remaining.Add(-1) == 0 {
		st.end = time.Now()
		close(st.finished)
	}
}

// release counts one input of op w as on w's device.
func (x *executor) release(w int) {
	if x.cur.Load().pending[w].Add(-1) == 0 {
		x.ready[x.placement[w]] <- w
	}
}

// wake is what a step sends each device first where workers spin: a
// worker asleep since the last step wakes and spins at once.
const wake = -1

// maxSpin bounds how long a waiting worker spins before it sleeps:
// sleeping and waking a core costs ~20 us here, and a core woken from
// idle ran its first op up to 3x slower than its one-core time (nce's
// placements), so a worker spins while its step runs, up to this long.
const maxSpin = 2 * time.Millisecond

// device runs the ops that become ready on device d, one at a time, and
// after each one copies its output to the other devices that read it,
// one copy at a time (on a CPU, a core makes the copy: the producer's).
func (x *executor) device(d int) {
	for {
		v, ok := x.next(d)
		if !ok {
			return
		}
		if v == wake {
			continue
		}
		if run := x.run[v]; run != nil {
			start := time.Now()
			err := run()
			x.opTime[v] = time.Since(start).Seconds()
			if err != nil {
				select {
				case x.cur.Load().failed <- fmt.Errorf("place: execute %s: op %d (%s): %w", x.g.Name, v, x.g.Ops[v].Name, err):
				default:
				}
				continue // the step never finishes: its consumers wait
			}
		}
		for _, w := range x.local[v] {
			x.release(w)
		}
		for _, c := range x.copies[v] {
			copy(c.dst, c.src)
			for _, w := range c.consumers {
				x.release(w)
			}
			x.done()
		}
		x.done()
	}
}

// next is device d's next ready op, false once the executor closes. When
// workers may spin, it polls while the current step has work left, for
// at most maxSpin, before it sleeps; an op received asleep is counted in
// x.sleeps.
func (x *executor) next(d int) (int, bool) {
	deadline := time.Now().Add(maxSpin)
	for polls := 0; ; polls++ {
		select {
		case v := <-x.ready[d]:
			return v, true
		default:
		}
		st := x.cur.Load()
		if st == nil || st.remaining.Load() == 0 {
			break
		}
		if !x.spin || (polls%64 == 63 && time.Now().After(deadline)) {
			break
		}
	}
	select {
	case <-x.stop:
		return 0, false
	case v := <-x.ready[d]:
		if v != wake {
			x.sleeps.Add(1)
		}
		return v, true
	}
}
