package place

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/heterps/heterps/native"
)

// Measuring bounds: ops larger than this keep their roofline time, so that
// measuring a big graph stays within seconds and memory.
const (
	measureMaxFLOPs  = 2e10
	measureMaxFloats = 1 << 27 // 512 MiB per buffer
	measureMaxRows   = 1 << 20 // rows of a measured embedding table
)

// Measured is per-op times measured on this machine's CPU: Seconds[i] is
// op i's time, or NaN when it was not measured (its kind has no kernel
// here, or it is too large).
type Measured struct {
	Seconds  []float64
	Measured int    // ops with a measured time
	Kernels  int    // distinct kernel shapes timed
	How      string // MeasuredAlone or MeasuredInStep
	// ByDevice, when set, holds per device of the simulated set the op
	// times measured on that device's own CPU (nil for devices that are not
	// local): the cores of a shared machine do not run at one speed.
	ByDevice [][]float64
	// Link is the transfer between two cores of this machine, when it was
	// measured (MeasureLocal); nil keeps the devices' own link figures.
	Link *Link
}

// How op times were measured.
const (
	MeasuredAlone  = "alone"   // each kernel timed by itself, hot in the caches (Measure)
	MeasuredInStep = "in-step" // each op timed inside a step executed on one core (MeasureInStep)
)

// MeasureLocal measures g for the simulator's local devices: the ops in a
// step executed on one core of threads threads (MeasureInStep) when every
// op has a kernel here and fits, otherwise each kernel alone (Measure), and
// the link between two cores (MeasureLink); fastest of reps each.
func MeasureLocal(ctx context.Context, g *Graph, threads, reps int) (*Measured, error) {
	var m *Measured
	var err error
	if executable(g) {
		m, err = MeasureInStep(ctx, g, threads, reps)
	} else {
		be, berr := native.NewCPU(native.CPUOptions{Threads: max(threads, 1)})
		if berr != nil {
			return nil, berr
		}
		m, err = Measure(ctx, g, be, reps)
	}
	if err != nil {
		return nil, err
	}
	link, err := MeasureLink(ctx, reps)
	if err != nil {
		return nil, err
	}
	m.Link = &link
	return m, nil
}

// executable reports whether every op of g but the input has a kernel
// here small enough to run (so that Execute can run the graph).
func executable(g *Graph) bool {
	for _, op := range g.Ops {
		if op.Kind == KindInput {
			continue
		}
		if !hasKernel(op) {
			return false
		}
	}
	return true
}

// Measure times every op of g with the real kernels on be (the fastest of
// reps runs after one warm-up), one timing per distinct kind and shape.
func Measure(ctx context.Context, g *Graph, be native.Backend, reps int) (*Measured, error) {
	if reps < 1 {
		reps = 1
	}
	type key struct {
		kind string
		dims [3]int
	}
	cache := map[key]float64{}
	m := &Measured{Seconds: make([]float64, len(g.Ops)), How: MeasuredAlone}
	for i, op := range g.Ops {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k := key{op.Kind, op.Dims}
		sec, ok := cache[k]
		if !ok {
			run, err := kernelOf(be, op)
			if err != nil {
				return nil, fmt.Errorf("place: measuring op %d (%s): %w", i, op.Name, err)
			}
			sec = math.NaN()
			if run != nil {
				if sec, err = fastest(run, reps); err != nil {
					return nil, fmt.Errorf("place: measuring op %d (%s): %w", i, op.Name, err)
				}
				m.Kernels++
			}
			cache[k] = sec
		}
		m.Seconds[i] = sec
		if !math.IsNaN(sec) {
			m.Measured++
		}
	}
	return m, nil
}

// UseMeasured sets the measured times on every Local device, and the
// measured link, if any, between two Local devices.
func (s *Simulator) UseMeasured(m *Measured) {
	if m.Link != nil {
		s.localLink = m.Link
	}
	for d, dev := range s.devs {
		if !dev.Local {
			continue
		}
		seconds := m.Seconds
		if d < len(m.ByDevice) && m.ByDevice[d] != nil {
			seconds = m.ByDevice[d]
		}
		for i, sec := range seconds {
			if !math.IsNaN(sec) {
				s.times[i][d] = sec
			}
		}
	}
}

func fastest(run func() error, reps int) (float64, error) {
	if err := run(); err != nil {
		return 0, err
	}
	best := math.Inf(1)
	for range reps {
		start := time.Now()
		if err := run(); err != nil {
			return 0, err
		}
		best = math.Min(best, time.Since(start).Seconds())
	}
	return best, nil
}

// kernelOf returns a closure running op's kernel on buffers allocated now,
// or nil when the op is not measured.
func kernelOf(be native.Backend, op Op) (func() error, error) {
	if !hasKernel(op) {
		return nil, nil
	}
	d0, d1, d2 := measuredDims(op)
	switch op.Kind {
	case KindMatMul:
		m, n, k := d0, d1, d2
		a, b, c := be.Alloc(m*k), be.Alloc(k*n), be.Alloc(m*n)
		return func() error { return be.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n) }, nil
	case KindAct:
		x, bias, y := be.Alloc(d0*d1), be.Alloc(d1), be.Alloc(d0*d1)
		return func() error { return be.BiasAct(native.ReLU, d0, d1, x, bias, y) }, nil
	case KindActGrad:
		y, dy, dx, db := be.Alloc(d0*d1), be.Alloc(d0*d1), be.Alloc(d0*d1), be.Alloc(d1)
		return func() error { return be.BiasActBackward(native.ReLU, d0, d1, y, dy, dx, db) }, nil
	case KindConcat:
		src, dst := be.Alloc(d0*d1), be.Alloc(d0*d1)
		return func() error { return be.Copy(dst, src) }, nil
	case KindGather, KindGatherGrad:
		rows, dim, n := d0, d1, d2
		offsets, ids := bags(n, rows)
		if op.Kind == KindGather {
			table, out := be.Alloc(rows*dim), be.Alloc(n*dim)
			return func() error { return be.EmbeddingBag(native.PoolSum, table, rows, dim, offsets, ids, out) }, nil
		}
		dout := be.Alloc(n * dim)
		return func() error {
			_, err := be.EmbeddingBagBackward(native.PoolSum, dim, offsets, ids, dout)
			return err
		}, nil
	case KindUpdate:
		o, w, g := optimiser(d1), be.Alloc(d0), be.Alloc(d0)
		state := allocs(be, o.StateBuffers(), d0)
		return func() error { return be.Update(o, w, g, state...) }, nil
	case KindSparseUpdate:
		// The rows of a batch land anywhere in the table: spread them over
		// one twice as large.
		n, dim, o := d0, d1, optimiser(d2)
		rows := 2 * n
		table, g := be.Alloc(rows*dim), be.Alloc(n*dim)
		state := allocs(be, o.StateBuffers(), rows*dim)
		idx := make([]int64, n)
		for i := range idx {
			idx[i] = int64(2 * i)
		}
		return func() error { return be.UpdateRows(o, table, rows, dim, idx, g, state...) }, nil
	case KindLoss:
		logits, dx := be.Alloc(d0*d1), be.Alloc(d0*d1)
		if d1 == 1 {
			labels := be.Alloc(d0)
			return func() error { return be.BCEWithLogitsBackward(d0, logits, labels, 1, dx) }, nil
		}
		labels := make([]int64, d0)
		return func() error {
			_, err := be.SoftmaxCrossEntropy(d0, d1, logits, labels, 1, dx)
			return err
		}, nil
	case KindSimilarity:
		a, b := make([]float32, d0*d1), make([]float32, d0*d1)
		out := make([]float64, d0)
		return func() error { hostDots(a, b, d1, max(d2, 1), out); return nil }, nil
	case KindLSTM:
		z, bias, cp, gates, c, h := be.Alloc(4*d0*d1), be.Alloc(4*d1), be.Alloc(d0*d1), be.Alloc(4*d0*d1), be.Alloc(d0*d1), be.Alloc(d0*d1)
		return func() error { return be.LSTMForward(d0, d1, z, bias, cp, gates, c, h) }, nil
	case KindLSTMGrad:
		gates, cp, c, dh, dc, dz, dcp := be.Alloc(4*d0*d1), be.Alloc(d0*d1), be.Alloc(d0*d1), be.Alloc(d0*d1), be.Alloc(d0*d1), be.Alloc(4*d0*d1), be.Alloc(d0*d1)
		return func() error { return be.LSTMBackward(d0, d1, gates, cp, c, dh, dc, dz, dcp) }, nil
	}
	return nil, nil
}

// hasKernel reports whether op has a kernel here that is small enough to
// time (kernelOf returns a closure for it).
func hasKernel(op Op) bool {
	switch op.Kind {
	case KindMatMul, KindAct, KindActGrad, KindConcat, KindGather, KindGatherGrad, KindUpdate,
		KindSparseUpdate, KindLoss, KindSimilarity, KindLSTM, KindLSTMGrad:
	default:
		return false
	}
	d0, d1, d2 := measuredDims(op)
	return op.FLOPs <= measureMaxFLOPs && !tooBig(op.Kind, d0, d1, d2)
}

// measuredDims are op's dimensions as its kernel is timed: an embedding
// table's rows capped (the ids touch few of them).
func measuredDims(op Op) (d0, d1, d2 int) {
	d0, d1, d2 = op.Dims[0], op.Dims[1], op.Dims[2]
	switch op.Kind {
	case KindGather, KindGatherGrad, KindSparseUpdate:
		d0 = min(d0, measureMaxRows)
	}
	return d0, d1, d2
}

// tooBig reports whether some buffer of the op's kernel would exceed
// measureMaxFloats.
func tooBig(kind string, d0, d1, d2 int) bool {
	sizes := []int{d0 * d1}
	switch kind {
	case KindMatMul:
		sizes = []int{d0 * d2, d2 * d1, d0 * d1}
	case KindGather, KindGatherGrad:
		sizes = []int{d0 * d1, d2 * d1}
	case KindSparseUpdate:
		sizes = []int{2 * d0 * d1}
	case KindLSTM, KindLSTMGrad:
		sizes = []int{4 * d0 * d1}
	case KindSimilarity:
		sizes = []int{d0 * d1}
	case KindUpdate:
		sizes = []int{d0}
	}
	for _, n := range sizes {
		if n > measureMaxFloats || n < 0 {
			return true
		}
	}
	return false
}

// optimiser is the optimiser keeping states floats per weight: SGD, Adagrad
// or Adam.
func optimiser(states int) native.Optim {
	switch states {
	case 0:
		return native.Optim{Kind: native.SGD, LR: 1e-3, Step: 1}
	case 1:
		return native.Optim{Kind: native.Adagrad, LR: 1e-2, Eps: 1e-8, Step: 1}
	}
	return native.Optim{Kind: native.Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
}

func allocs(be native.Backend, k, n int) []native.Buffer {
	bufs := make([]native.Buffer, k)
	for i := range bufs {
		bufs[i] = be.Alloc(n)
	}
	return bufs
}

// bags is n one-id bags with ids spread over rows (a fixed stride, so that
// the rows touched look like hashed ids).
func bags(n, rows int) (offsets, ids []int64) {
	offsets, ids = make([]int64, n+1), make([]int64, n)
	for i := range n {
		offsets[i+1] = int64(i + 1)
		ids[i] = int64((i * 7919) % rows)
	}
	return offsets, ids
}

// hostDots is the host loop of KindSimilarity: passes dot products per row
// of a and b (rows of width floats), accumulated in float64 as daemon/nn's
// similarity and NCE layers do.
func hostDots(a, b []float32, width, passes int, out []float64) {
	for i := range out {
		x, y := a[i*width:(i+1)*width], b[i*width:(i+1)*width]
		s := 0.0
		for range passes {
			for k := range x {
				s += float64(x[k]) * float64(y[k])
			}
		}
		out[i] = s
	}
}

// MeasureInStep times every op as it runs inside a step: the whole graph
// executed on one cpu device of the given threads (Execute), each op's
// fastest of reps steps, calibrated to the fastest step (calibrate).
// Unlike Measure's kernels, timed alone and hot in the caches, an op here
// finds its buffers as the ops before it left them (each op has buffers of
// its own, so its inputs are colder than in the trainer, where it reads
// what the op before it just wrote); the two bound the trainer's op times
// from either side. The input takes no time (NaN).
func MeasureInStep(ctx context.Context, g *Graph, threads, reps int) (*Measured, error) {
	x, err := newExecutor(g, oneCore(threads), make([]int, len(g.Ops)), nil)
	if err != nil {
		return nil, err
	}
	ex, err := executeInTurn(ctx, reps, 0, x)
	if err != nil {
		return nil, err
	}
	return inStep(g, ex[0]), nil
}

// oneCore is the device MeasureInStep runs a graph on.
func oneCore(threads int) []Device {
	return []Device{{Name: "cpu", Kind: "cpu", Threads: max(threads, 1)}}
}

// inStep is the op times of g's one-device execution ex, calibrated in
// place (ex.OpSeconds becomes the result's Seconds).
func inStep(g *Graph, ex *Executed) *Measured {
	m := &Measured{Seconds: ex.OpSeconds, How: MeasuredInStep}
	for i, op := range g.Ops {
		if op.Kind == KindInput {
			m.Seconds[i] = math.NaN()
			continue
		}
		m.Measured++
		m.Kernels++
	}
	calibrate(m, ex)
	return m
}

// checkMinTime is how long CheckPlacement's rounds last at least: the
// fastest step of a small graph must not come from one burst of a shared
// machine's load.
const checkMinTime = time.Second

// Checked is a placement's simulated step beside its executed one.
type Checked struct {
	Simulated float64   // the simulator's step with the op times and link below
	Executed  *Executed // the placement run for real
	// Measured is the op times inside steps run on each local device's CPU
	// alone (ByDevice; Seconds are the first's), and the link.
	Measured *Measured
}

// CheckPlacement holds the simulator against a placement executed for
// real: it runs rounds of one step of g on each local device of devs
// alone, pinned to that device's CPU (MeasureInStep's op times, per
// device), and one step of the placement on devs (as Execute), in turn,
// so that all of them see the same load of a shared machine (reps rounds,
// more until checkMinTime has passed); it measures the link between two
// cores, and simulates the placement with those op times on the local
// devices. All of these executions run each op on the same buffers.
func CheckPlacement(ctx context.Context, g *Graph, devs []Device, placement []int, reps int) (*Checked, error) {
	var xs []*executor
	var locals []int
	shared := make(opBuffers, len(g.Ops))
	for d, dev := range devs {
		if !dev.Local {
			continue
		}
		x, err := newExecutor(g, oneCore(dev.Threads), make([]int, len(g.Ops)), shared)
		if err != nil {
			return nil, err
		}
		x.cpus[0] = d
		xs, locals = append(xs, x), append(locals, d)
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("place: check %s: no device is marked local", g.Name)
	}
	placed, err := newExecutor(g, devs, placement, shared)
	if err != nil {
		return nil, err
	}
	ex, err := executeInTurn(ctx, reps, checkMinTime, append(xs, placed)...)
	if err != nil {
		return nil, err
	}
	m := inStep(g, ex[0]) // the first local device's, as Seconds
	m.ByDevice = make([][]float64, len(devs))
	m.ByDevice[locals[0]] = m.Seconds
	for k, d := range locals[1:] {
		m.ByDevice[d] = inStep(g, ex[k+1]).Seconds
	}
	link, err := MeasureLink(ctx, reps)
	if err != nil {
		return nil, err
	}
	m.Link = &link
	s, err := NewSimulator(g, devs)
	if err != nil {
		return nil, err
	}
	s.UseMeasured(m)
	r, err := s.Run(placement)
	if err != nil {
		return nil, err
	}
	return &Checked{Simulated: r.Step, Executed: ex[len(ex)-1], Measured: m}, nil
}

// calibrate makes m's op times, each the fastest of several steps of a
// one-device execution ex, add up to ex's fastest step: the sum of
// per-op minima taken from different steps is faster than any one step
// was, so the kernel times are scaled by (Step - Overhead) / their sum,
// and each op gets an even share of the Overhead (handing the ops over).
func calibrate(m *Measured, ex *Executed) {
	if m.Measured == 0 {
		return
	}
	sum := 0.0
	for _, sec := range m.Seconds {
		if !math.IsNaN(sec) {
			sum += sec
		}
	}
	scale := 1.0
	if kernels := ex.Step - ex.Overhead; sum > 0 && kernels > 0 {
		scale = kernels / sum
	}
	perOp := math.Min(ex.Overhead, ex.Step) / float64(m.Measured)
	for i, sec := range m.Seconds {
		m.Seconds[i] = sec*scale + perOp // NaN stays NaN
	}
}
