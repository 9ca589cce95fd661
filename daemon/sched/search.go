package sched

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
)

// search solves one target level exactly when stages are coupled: by summed
// unit limits of the tracked types and, with trackTotal, by ps_cores rounding
// up the total units. It is a best-first (A*) search over partial plans
// (labels: a prefix of layers split into provisioned stages). A label's
// priority is its linear price plus the cheapest linear price of covering the
// remaining layers ignoring the coupling, a lower bound on any completion;
// the search stops when the best priority left exceeds the best complete
// plan found. Labels at the same prefix length and last type are pruned when
// another one is no more expensive, no slower and uses no more of any
// tracked resource. It returns nil when no plan reaches x.
func (s *exactSolver) search(ctx context.Context, x float64, tracked []bool, trackTotal bool) ([]Segment, error) {
	h := s.suffixBounds(x)
	sr := &labelSearch{s: s, x: x, h: h, trackTotal: trackTotal, pos: make([]int, s.nt),
		buckets: make([][]*label, (s.n+1)*(s.nt+1)), bestObj: math.Inf(1)}
	for t := range s.nt {
		sr.pos[t] = -1
		if tracked[t] {
			sr.pos[t] = sr.ntracked
			sr.ntracked++
		}
	}
	root := &label{t: -1, minX: math.Inf(1), use: make([]int, sr.ntracked)}
	root.f = h.at(0, -1)
	if math.IsInf(root.f, 1) {
		return nil, nil
	}
	heap.Push(&sr.open, root)
	for pops := 0; sr.open.Len() > 0; pops++ {
		if pops%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		l := heap.Pop(&sr.open).(*label)
		if l.dead {
			continue
		}
		if l.f > sr.bestObj {
			break
		}
		if l.j == s.n {
			sr.offerGoal(l)
			continue
		}
		if err := sr.expand(l); err != nil {
			return nil, err
		}
	}
	if sr.best == nil {
		return nil, nil
	}
	return sr.best.segments(), nil
}

// label is a partial plan: layers 0..j-1 split into stages, the last on t
// with k units, reached from parent.
type label struct {
	j, t, k int
	cost    float64 // sum of price*units
	lin     float64 // sum of linPrice*units
	total   int     // units in all
	use     []int   // units per tracked type
	minX    float64 // slowest stage so far
	f       float64 // lin + lower bound on the rest
	parent  *label
	dead    bool // dominated after it was queued
}

func (l *label) segments() []Segment {
	var rev []Segment
	for ; l.parent != nil; l = l.parent {
		rev = append(rev, Segment{First: l.parent.j, Last: l.j - 1, Type: l.t, Units: l.k})
	}
	slices.Reverse(rev)
	return rev
}

type labelSearch struct {
	s          *exactSolver
	x          float64
	h          suffixBounds
	trackTotal bool
	pos        []int // index of a type in label.use, -1 if untracked
	ntracked   int
	open       labelHeap
	buckets    [][]*label // live labels per (prefix length, last type)
	labels     int
	best       *label
	bestObj    float64
}

// objective is what a complete plan costs per hour as the search sees it:
// exact when the total units are tracked, linear PS pricing otherwise.
func (sr *labelSearch) objective(l *label) float64 {
	if sr.trackTotal {
		p := sr.s.p
		return l.cost + p.PSPrice()*float64(p.PSCores(l.total))
	}
	return l.lin
}

func (sr *labelSearch) offerGoal(l *label) {
	obj := sr.objective(l)
	if sr.best == nil || better(obj, l.minX, sr.bestObj, sr.best.minX) {
		sr.best, sr.bestObj = l, obj
	}
}

// expand queues every stage that can follow l.
func (sr *labelSearch) expand(l *label) error {
	s, p := sr.s, sr.s.p
	b, scale := p.Batch, p.scale()
	for t := range s.nt {
		if t == l.t {
			continue
		}
		max := p.Types[t].MaxUnits
		if at := sr.pos[t]; at >= 0 {
			max -= l.use[at]
		}
		if max < 1 {
			continue
		}
		var serial, parallel float64
		for i := l.j; i < s.n; i++ {
			serial, parallel = addLayer(serial, parallel, p.Layers[i], t)
			sh := shape{cs: scale * serial, cp: scale * parallel, ds: s.ds[i*s.nt+t], dp: s.dp[i*s.nt+t]}
			kc, why := partUnits(b, sh.cs, sh.cp, sr.x, max)
			if why != reached {
				break
			}
			kd := s.dtUnits[i*s.nt+t]
			if kd < 0 || kd > max {
				continue
			}
			k, ok := bothParts(b, sh, sr.x, kc, kd)
			if !ok {
				continue
			}
			if err := sr.push(l, i+1, t, k, b/sh.et(k)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sr *labelSearch) push(parent *label, j, t, k int, x float64) error {
	s := sr.s
	n := &label{j: j, t: t, k: k, parent: parent,
		cost:  parent.cost + s.p.Types[t].Price*float64(k),
		lin:   parent.lin + s.lin[t]*float64(k),
		total: parent.total + k,
		minX:  math.Min(parent.minX, x),
		use:   slices.Clone(parent.use)}
	if at := sr.pos[t]; at >= 0 {
		n.use[at] += k
	}
	n.f = n.lin + sr.h.at(j, t)
	if n.f > sr.bestObj || math.IsInf(n.f, 1) {
		return nil
	}
	key := j*(s.nt+1) + t + 1
	live := sr.buckets[key][:0]
	for _, o := range sr.buckets[key] {
		if o.dead {
			continue
		}
		if sr.dominates(o, n) {
			return nil
		}
		if sr.dominates(n, o) {
			o.dead = true
			continue
		}
		live = append(live, o)
	}
	sr.buckets[key] = append(live, n)
	sr.labels++
	if sr.labels > s.opts.maxLabels {
		return fmt.Errorf("%w (%d labels at target %.6g samples/s)", ErrSearchLimit, s.opts.maxLabels, sr.x)
	}
	heap.Push(&sr.open, n)
	return nil
}

// dominates says a is at least as good as b in every respect that matters
// for completing them.
func (sr *labelSearch) dominates(a, b *label) bool {
	if a.minX < b.minX {
		return false
	}
	if sr.trackTotal {
		if a.cost > b.cost || a.total > b.total {
			return false
		}
	} else if a.lin > b.lin {
		return false
	}
	for i, u := range a.use {
		if u > b.use[i] {
			return false
		}
	}
	return true
}

// suffixBounds holds, per layer j, the best two prices of covering layers
// j..n-1 under the relaxation, by type of the first stage.
type suffixBounds []topTwo

// at is the least price of completing a prefix of length j whose last stage
// is on t (the next stage must be on another type).
func (sb suffixBounds) at(j, t int) float64 {
	if j == len(sb) {
		return 0
	}
	v, _, _ := sb[j].excluding(t)
	return v
}

// suffixBounds runs the relaxed DP backwards from the last layer at target x.
func (s *exactSolver) suffixBounds(x float64) suffixBounds {
	p, nt := s.p, s.nt
	sb := make(suffixBounds, s.n)
	b, scale := p.Batch, p.scale()
	for j := s.n - 1; j >= 0; j-- {
		sb[j] = emptyTopTwo()
		for t := range nt {
			best := math.Inf(1)
			var serial, parallel float64
			for i := j; i < s.n; i++ {
				serial, parallel = addLayer(serial, parallel, p.Layers[i], t)
				sh := shape{cs: scale * serial, cp: scale * parallel}
				kc, why := partUnits(b, sh.cs, sh.cp, x, p.Types[t].MaxUnits)
				if why != reached {
					break
				}
				kd := s.dtUnits[i*nt+t]
				if kd < 0 {
					continue
				}
				k, ok := bothParts(b, sh, x, kc, kd)
				if !ok {
					continue
				}
				best = math.Min(best, s.lin[t]*float64(k)+sb.at(i+1, t))
			}
			sb[j].offer(best, 0, t)
		}
	}
	return sb
}

// labelHeap orders labels by priority, then by throughput (faster first).
type labelHeap []*label

func (h labelHeap) Len() int { return len(h) }
func (h labelHeap) Less(i, j int) bool {
	return h[i].f < h[j].f || (h[i].f == h[j].f && h[i].minX > h[j].minX)
}
func (h labelHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *labelHeap) Push(v any)   { *h = append(*h, v.(*label)) }
func (h *labelHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	*h = old[:len(old)-1]
	return l
}
