package place

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Options tune the methods. The zero value gives the defaults.
type Options struct {
	Seed uint64
	// ExactBound is the most placements exact enumerates (devices^groups);
	// default 1<<18.
	ExactBound float64
	// RL is the rl method's settings; zero fields take the defaults.
	RL RLOptions
}

// Outcome is what a method found.
type Outcome struct {
	Method    string
	Placement []int // device per op
	Result    Result
	Search    time.Duration
	Evaluated int // placements simulated
	// PolicyCost and BestSampledCost are rl's: the cost of the trained
	// policy's most likely placement (which is Placement) and of the best
	// placement it sampled while training.
	PolicyCost, BestSampledCost float64
}

// method finds a placement; it reports the placements it simulated in out.
type method func(ctx context.Context, s *Simulator, o Options, out *Outcome) ([]int, error)

var methods = map[string]method{
	"single": single,
	"expert": expert,
	"mincut": mincut,
	"exact":  exact,
	"rl":     reinforce,
}

// Methods lists the method names in the order they are reported.
func Methods() []string { return []string{"single", "expert", "mincut", "exact", "rl"} }

// Place runs one method on the simulator's graph and devices.
func Place(ctx context.Context, name string, s *Simulator, o Options) (*Outcome, error) {
	m, ok := methods[name]
	if !ok {
		return nil, fmt.Errorf("place: unknown method %q (want one of %v)", name, Methods())
	}
	out := &Outcome{Method: name}
	start := time.Now()
	p, err := m(ctx, s, o, out)
	out.Search = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("place: %s on %s: %w", name, s.g.Name, err)
	}
	out.Placement = p
	if out.Result, err = s.Run(p); err != nil {
		return nil, fmt.Errorf("place: %s on %s: %w", name, s.g.Name, err)
	}
	return out, nil
}

// single puts every op on one device, the one with the cheapest step.
func single(_ context.Context, s *Simulator, _ Options, out *Outcome) ([]int, error) {
	var best []int
	bestCost := math.Inf(1)
	for d := range s.devs {
		p := slices.Repeat([]int{d}, len(s.g.Ops))
		out.Evaluated++
		if c := s.Cost(p); c < bestCost {
			best, bestCost = p, c
		}
	}
	return best, nil
}

// expert is the human placement of the paper's baselines: embeddings (their
// lookups, gradients and sparse updates), the optimiser and the input on
// the CPU, every other op on the fastest device. Without a CPU, everything
// goes to the fastest device.
func expert(_ context.Context, s *Simulator, _ Options, out *Outcome) ([]int, error) {
	fast, cpu := Fastest(s.devs), FirstCPU(s.devs)
	if cpu < 0 {
		cpu = fast
	}
	p := make([]int, len(s.g.Ops))
	for i, op := range s.g.Ops {
		switch op.Kind {
		case KindInput, KindGather, KindGatherGrad, KindSparseUpdate, KindUpdate:
			p[i] = cpu
		default:
			p[i] = fast
		}
	}
	out.Evaluated = 1
	return p, nil
}

// exact enumerates every assignment of devices to co-location groups, up to
// permutations of identical devices (one placement per class of
// interchangeable ones), and keeps the cheapest. It refuses graphs with
// more than Options.ExactBound assignments.
func exact(ctx context.Context, s *Simulator, o Options, out *Outcome) ([]int, error) {
	G, D := len(s.g.Groups), len(s.devs)
	bound := o.ExactBound
	if bound <= 0 {
		bound = 1 << 18
	}
	if n := math.Pow(float64(D), float64(G)); n > bound {
		return nil, fmt.Errorf("%w: %d devices ^ %d groups = %.3g, more than the bound %.3g", ErrTooLarge, D, G, n, bound)
	}
	e := &enumerator{s: s, class: deviceClasses(s), assign: make([]int, G), bestCost: math.Inf(1), ctx: ctx}
	e.used = make([]int, len(s.devs))
	if err := e.walk(0); err != nil {
		return nil, err
	}
	out.Evaluated = e.evaluated
	return GroupPlacement(s.g, e.best), nil
}

// deviceClasses gives each device the index of the first device identical
// to it (but for the name) with the same op times; such devices are
// interchangeable in the simulator.
func deviceClasses(s *Simulator) []int {
	class := make([]int, len(s.devs))
	for i, d := range s.devs {
		class[i] = i
		for j := range i {
			o := s.devs[j]
			o.Name = d.Name
			if o == d && sameTimes(s, i, j) {
				class[i] = class[j]
				break
			}
		}
	}
	return class
}

func sameTimes(s *Simulator, a, b int) bool {
	for _, t := range s.times {
		if t[a] != t[b] {
			return false
		}
	}
	return true
}

type enumerator struct {
	ctx       context.Context
	s         *Simulator
	class     []int
	used      []int // per class leader: how many of its devices are in use
	assign    []int
	best      []int
	bestCost  float64
	evaluated int
}

// walk assigns group g onward. Within a class of identical devices, group g
// may use a device only if every earlier device of the class is already
// used: each placement is enumerated once up to such permutations.
func (e *enumerator) walk(g int) error {
	if g == len(e.assign) {
		e.evaluated++
		if e.evaluated%4096 == 0 {
			if err := e.ctx.Err(); err != nil {
				return err
			}
		}
		if c := e.s.Cost(GroupPlacement(e.s.g, e.assign)); c < e.bestCost {
			e.best, e.bestCost = slices.Clone(e.assign), c
		}
		return nil
	}
	for d := range e.s.devs {
		leader := e.class[d]
		rank := e.rankInClass(d)
		if rank > e.used[leader] {
			continue
		}
		fresh := rank == e.used[leader]
		if fresh {
			e.used[leader]++
		}
		e.assign[g] = d
		err := e.walk(g + 1)
		if fresh {
			e.used[leader]--
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rankInClass is how many devices of d's class come before d.
func (e *enumerator) rankInClass(d int) int {
	r := 0
	for j := range d {
		if e.class[j] == e.class[d] {
			r++
		}
	}
	return r
}

// groupTimes is each group's compute time per device: [group][device].
func groupTimes(s *Simulator) [][]float64 {
	t := make([][]float64, len(s.g.Groups))
	for g := range t {
		t[g] = make([]float64, len(s.devs))
	}
	for i, op := range s.g.Ops {
		for d := range s.devs {
			t[op.Group][d] += s.times[i][d]
		}
	}
	return t
}

// byspeed orders the devices fastest first.
func bySpeed(devs []Device) []int {
	order := make([]int, len(devs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return devs[order[a]].PeakFLOPS > devs[order[b]].PeakFLOPS })
	return order
}
