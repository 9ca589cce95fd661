package place

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

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
}

// Execute runs the step of g under placement for real, reps times after
// one warm-up, on this machine's CPU: each device is a native CPU backend
// of its Threads whose ops run on a goroutine of its own, locked to a
// thread pinned to a CPU of its own (device d on the d-th CPU this process
// may use, modulo their number), in the order they become ready (their kernels as Measure times them, on buffers of their
// own); an output that a consumer on another device needs is copied
// there, once per device, by the producer device's link goroutine (one
// copy at a time, as the simulator's links), and so are the updates'
// new weights for the next step's readers (Op.NextStep). A step ends when
// every op and copy is done. Only cpu devices can execute here.
func Execute(ctx context.Context, g *Graph, devs []Device, placement []int, reps int) (*Executed, error) {
	x, err := newExecutor(g, devs, placement)
	if err != nil {
		return nil, err
	}
	if _, err := x.step(ctx); err != nil { // warm-up: page in the buffers
		return nil, err
	}
	out := &Executed{Step: math.Inf(1), Moved: x.moved, OpSeconds: make([]float64, len(g.Ops))}
	for i := range out.OpSeconds {
		out.OpSeconds[i] = math.Inf(1)
	}
	for range max(reps, 1) {
		sec, err := x.step(ctx)
		if err != nil {
			return nil, err
		}
		out.Steps = append(out.Steps, sec)
		for i, t := range x.opTime {
			out.OpSeconds[i] = math.Min(out.OpSeconds[i], t)
		}
		out.Step = math.Min(out.Step, sec)
	}
	if out.Overhead, err = x.overhead(ctx, max(reps, 1)); err != nil {
		return nil, err
	}
	return out, nil
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
	from, to  int // ops' devices
	src, dst  []float32
	consumers []int
}

type executor struct {
	g         *Graph
	placement []int
	devs      int
	run       []func() error // per op; nil for the input
	local     [][]int        // per op: consumers on its own device
	copies    [][]*copyTo    // per op: its transfers
	transfers int
	moved     int64
	opTime    []float64 // the last step's, per op (each written by its device's goroutine)
}

func newExecutor(g *Graph, devs []Device, placement []int) (*executor, error) {
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
	x := &executor{g: g, placement: placement, devs: len(devs), run: make([]func() error, n), local: make([][]int, n),
		copies: make([][]*copyTo, n), opTime: make([]float64, n)}
	for i, op := range g.Ops {
		d := placement[i]
		if d < 0 || d >= len(devs) {
			return nil, fmt.Errorf("place: execute %s: op %d (%s) placed on device %d of %d", g.Name, i, op.Name, d, len(devs))
		}
		if op.Kind == KindInput {
			continue
		}
		run, err := kernelOf(bes[d], op)
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
	c := &copyTo{from: x.placement[v], to: d, src: make([]float32, floats), dst: make([]float32, floats)}
	x.copies[v] = append(x.copies[v], c)
	x.transfers++
	x.moved += x.g.Ops[v].Out
	return c
}

// step runs one step and returns its wall time.
func (x *executor) step(ctx context.Context) (float64, error) {
	n := len(x.g.Ops)
	pending := make([]atomic.Int32, n)
	for i, op := range x.g.Ops {
		pending[i].Store(int32(len(op.Inputs)))
	}
	ready, links := make([]chan int, x.devs), make([]chan *copyTo, x.devs)
	for d := range ready {
		ready[d], links[d] = make(chan int, n), make(chan *copyTo, x.transfers)
	}
	var remaining atomic.Int64
	remaining.Store(int64(n + x.transfers))
	finished, stop, failed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	done := func() {
		if remaining.Add(-1) == 0 {
			close(finished)
		}
	}
	release := func(w int) {
		if pending[w].Add(-1) == 0 {
			ready[x.placement[w]] <- w
		}
	}
	var wg sync.WaitGroup
	for d := range x.devs {
		wg.Go(func() {
			defer pinToCPU(d)()
			x.device(ready[d], links[d], stop, failed, release, done)
		})
		wg.Go(func() { linkLoop(links[d], stop, release, done) })
	}
	start := time.Now()
	for i, op := range x.g.Ops {
		if len(op.Inputs) == 0 {
			ready[x.placement[i]] <- i
		}
	}
	var err error
	select {
	case <-finished:
	case err = <-failed:
	case <-ctx.Done():
		err = ctx.Err()
	}
	elapsed := time.Since(start).Seconds()
	close(stop)
	wg.Wait()
	return elapsed, err
}

// device runs the ops that become ready on one device, one at a time.
func (x *executor) device(ready chan int, link chan *copyTo, stop chan struct{}, failed chan error, release func(int), done func()) {
	for {
		select {
		case <-stop:
			return
		case v := <-ready:
			if run := x.run[v]; run != nil {
				start := time.Now()
				err := run()
				x.opTime[v] = time.Since(start).Seconds()
				if err != nil {
					select {
					case failed <- fmt.Errorf("place: execute %s: op %d (%s): %w", x.g.Name, v, x.g.Ops[v].Name, err):
					default:
					}
					return
				}
			}
			for _, w := range x.local[v] {
				release(w)
			}
			for _, c := range x.copies[v] {
				link <- c
			}
			done()
		}
	}
}

// linkLoop makes one device's transfers, one at a time.
func linkLoop(link chan *copyTo, stop chan struct{}, release func(int), done func()) {
	for {
		select {
		case <-stop:
			return
		case c := <-link:
			copy(c.dst, c.src)
			for _, w := range c.consumers {
				release(w)
			}
			done()
		}
	}
}
