package place

import (
	"fmt"
	"math"
)

// OOMPenalty multiplies the step time of a placement that does not fit in
// some device's memory (times one plus the worst relative overflow), so that
// every method prefers any placement that fits.
const OOMPenalty = 10

// Result is the simulated outcome of one placement.
type Result struct {
	Step  float64 // simulated step time (makespan), seconds
	Cost  float64 // what methods minimise: Step, or penalised when it does not fit
	Fits  bool
	Mem   []int64 // bytes held per device
	Moved int64   // bytes transferred between devices
}

// Simulator replays a step's graph on devices for a placement (one device
// index per op). Each device runs one op at a time, taking among its ready
// ops the one ready first (then the lowest index); an op is ready once every
// input is on its device. An output goes once to each other device that
// consumes it, right after it is produced, over the producer device's link,
// which carries one transfer at a time (latency + bytes / min of the two
// links' bandwidths). Between two Local devices with a measured link the
// producer's core makes the copy, as Execute does: it is busy for
// bytes / bandwidth, and the consumer has the output latency later. The
// step ends when the last op is done and the new
// weights are on every device whose ops read them in the next step
// (Op.NextStep). A Simulator is used by one goroutine at a time.
type Simulator struct {
	g     *Graph
	devs  []Device
	times [][]float64 // [op][device] seconds
	succ  [][]int
	// localLink, when measured, is every transfer's between two Local
	// devices instead of their files' link figures.
	localLink *Link

	// scratch, reused between runs
	pending []int
	ready   []float64
	avail   []float64 // [op*D + device], -1 when not there
	heaps   []opHeap
}

// NewSimulator prepares the simulation of g on devs with per-op times from
// the roofline (Roofline); SetTime replaces them with measured ones.
func NewSimulator(g *Graph, devs []Device) (*Simulator, error) {
	if len(devs) == 0 {
		return nil, fmt.Errorf("place: graph %s: no devices", g.Name)
	}
	s := &Simulator{g: g, devs: devs, times: make([][]float64, len(g.Ops)), succ: make([][]int, len(g.Ops))}
	for i, op := range g.Ops {
		s.times[i] = make([]float64, len(devs))
		for d := range devs {
			s.times[i][d] = Roofline(op, devs[d])
		}
		for _, in := range op.Inputs {
			if in < 0 || in >= i {
				return nil, fmt.Errorf("place: graph %s: op %d (%s) reads op %d, not an earlier op", g.Name, i, op.Name, in)
			}
			s.succ[in] = append(s.succ[in], i)
		}
		for _, next := range op.NextStep {
			if next < 0 || next >= len(g.Ops) {
				return nil, fmt.Errorf("place: graph %s: op %d (%s) feeds op %d of %d", g.Name, i, op.Name, next, len(g.Ops))
			}
		}
	}
	n, D := len(g.Ops), len(devs)
	s.pending, s.ready, s.avail, s.heaps = make([]int, n), make([]float64, n), make([]float64, n*D), make([]opHeap, D)
	return s, nil
}

// clone is a simulator of the same graph, devices and op times with its
// own scratch, for another goroutine.
func (s *Simulator) clone() *Simulator {
	n, D := len(s.g.Ops), len(s.devs)
	c := *s
	c.pending, c.ready, c.avail, c.heaps = make([]int, n), make([]float64, n), make([]float64, n*D), make([]opHeap, D)
	return &c
}

// Roofline is an op's time on a device: the larger of its compute at peak
// FLOP/s and its memory traffic at the memory bandwidth, plus the launch
// latency. Input ops take no time.
func Roofline(op Op, d Device) float64 {
	if op.Kind == KindInput {
		return 0
	}
	return math.Max(op.FLOPs/d.PeakFLOPS, op.Bytes/d.MemBandwidth) + d.LaunchLatency
}

// SetTime sets op's time on device d (a measured one).
func (s *Simulator) SetTime(op, d int, seconds float64) { s.times[op][d] = seconds }

// Time is op's time on device d.
func (s *Simulator) Time(op, d int) float64 { return s.times[op][d] }

// Graph is the simulated graph.
func (s *Simulator) Graph() *Graph { return s.g }

// Devices are the simulated devices.
func (s *Simulator) Devices() []Device { return s.devs }

// transfer is the time to send bytes from device a to device b.
func (s *Simulator) transfer(bytes int64, a, b int) float64 {
	if l := s.measuredLink(a, b); l != nil {
		return l.Latency + float64(bytes)/l.Bandwidth
	}
	bw := math.Min(s.devs[a].LinkBandwidth, s.devs[b].LinkBandwidth)
	return s.devs[a].LinkLatency + float64(bytes)/bw
}

// measuredLink is the measured link between devices a and b when both are
// Local and one was measured, else nil.
func (s *Simulator) measuredLink(a, b int) *Link {
	if s.devs[a].Local && s.devs[b].Local {
		return s.localLink
	}
	return nil
}

// Run simulates placement (one device per op).
func (s *Simulator) Run(placement []int) (Result, error) {
	n, D := len(s.g.Ops), len(s.devs)
	if len(placement) != n {
		return Result{}, fmt.Errorf("place: placement has %d devices for %d ops", len(placement), n)
	}
	for i, d := range placement {
		if d < 0 || d >= D {
			return Result{}, fmt.Errorf("place: op %d (%s) placed on device %d of %d", i, s.g.Ops[i].Name, d, D)
		}
	}
	res := Result{Mem: make([]int64, D)}
	for i := range s.avail {
		s.avail[i] = -1
	}
	for d := range s.heaps {
		s.heaps[d] = s.heaps[d][:0]
	}
	for i, op := range s.g.Ops {
		s.pending[i], s.ready[i] = len(op.Inputs), 0
		res.Mem[placement[i]] += op.Mem
		if len(op.Inputs) == 0 {
			s.heaps[placement[i]].push(heapItem{0, i})
		}
	}
	free, link := make([]float64, D), make([]float64, D)
	for done := 0; done < n; done++ {
		d := s.nextDevice(free)
		it := s.heaps[d].pop()
		v := it.op
		finish := math.Max(it.ready, free[d]) + s.times[v][d]
		free[d] = finish
		res.Step = math.Max(res.Step, finish)
		s.avail[v*D+d] = finish
		for _, w := range s.succ[v] {
			b := placement[w]
			at := s.send(v, d, b, finish, link, free, &res)
			s.ready[w] = math.Max(s.ready[w], at)
			if s.pending[w]--; s.pending[w] == 0 {
				s.heaps[b].push(heapItem{s.ready[w], w})
			}
		}
		for _, w := range s.g.Ops[v].NextStep {
			res.Step = math.Max(res.Step, s.send(v, d, placement[w], finish, link, free, &res))
		}
	}
	res.Cost, res.Fits = s.penalise(res.Step, res.Mem)
	return res, nil
}

// send makes op v's output, produced on device a at time t, available on
// device b (once per device) and returns when it is there.
func (s *Simulator) send(v, a, b int, t float64, link, free []float64, res *Result) float64 {
	D := len(s.devs)
	at := s.avail[v*D+b]
	if at >= 0 {
		return at
	}
	if l := s.measuredLink(a, b); l != nil {
		free[a] = math.Max(t, free[a]) + float64(s.g.Ops[v].Out)/l.Bandwidth
		at = free[a] + l.Latency
	} else {
		start := math.Max(t, link[a])
		at = start + s.transfer(s.g.Ops[v].Out, a, b)
		link[a] = at
	}
	s.avail[v*D+b] = at
	res.Moved += s.g.Ops[v].Out
	res.Mem[b] += s.g.Ops[v].Out
	return at
}

// nextDevice is the device whose next op starts first.
func (s *Simulator) nextDevice(free []float64) int {
	best, bestAt := -1, math.Inf(1)
	for d, h := range s.heaps {
		if len(h) == 0 {
			continue
		}
		if at := math.Max(h[0].ready, free[d]); at < bestAt {
			best, bestAt = d, at
		}
	}
	return best
}

// penalise returns the cost of a step and whether its memory fits.
func (s *Simulator) penalise(step float64, mem []int64) (float64, bool) {
	worst := 0.0
	for d, m := range mem {
		if over := float64(m)/float64(s.devs[d].Memory) - 1; over > worst {
			worst = over
		}
	}
	if worst > 0 {
		return step * OOMPenalty * (1 + worst), false
	}
	return step, true
}

// Cost is Run's cost, +Inf when the placement is malformed.
func (s *Simulator) Cost(placement []int) float64 {
	r, err := s.Run(placement)
	if err != nil {
		return math.Inf(1)
	}
	return r.Cost
}

type heapItem struct {
	ready float64
	op    int
}

func (a heapItem) less(b heapItem) bool {
	return a.ready < b.ready || (a.ready == b.ready && a.op < b.op)
}

// opHeap is a binary min-heap of ready ops.
type opHeap []heapItem

func (h *opHeap) push(it heapItem) {
	*h = append(*h, it)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *opHeap) pop() heapItem {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(a) && a[l].less(a[m]) {
			m = l
		}
		if r < len(a) && a[r].less(a[m]) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

// GroupPlacement expands a device per group into a device per op.
func GroupPlacement(g *Graph, groups []int) []int {
	p := make([]int, len(g.Ops))
	for i, op := range g.Ops {
		p[i] = groups[op.Group]
	}
	return p
}
