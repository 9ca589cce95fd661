package place

import (
	"context"
	"math"
	"slices"
)

// mincut is the Scotch-like baseline: balanced partitioning of the
// co-location groups with communication cost. For k = 1..devices it splits
// the groups over the k fastest devices in proportion to their speed in two
// ways — contiguous runs in graph order, and parts grown breadth-first along
// the edges (greedy graph growing) — then refines each with greedy moves of
// one group to another device (Fiduccia–Mattheyses style, over all devices)
// while the partition objective — the largest device load plus the time of
// the cut edges' transfers, penalised when memory overflows — drops. Of the
// refined partitions it keeps the one the simulator finds fastest.
func mincut(ctx context.Context, s *Simulator, _ Options, out *Outcome) ([]int, error) {
	pg := newPartitionGraph(s)
	order := bySpeed(s.devs)
	var best []int
	bestCost := math.Inf(1)
	for k := 1; k <= len(s.devs); k++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, assign := range [][]int{pg.contiguous(order[:k]), pg.grown(order[:k])} {
			pg.refine(assign)
			p := GroupPlacement(s.g, assign)
			out.Evaluated++
			if c := s.Cost(p); c < bestCost {
				best, bestCost = p, c
			}
		}
	}
	return best, nil
}

type groupEdge struct {
	from, to int
	bytes    int64
}

// partitionGraph is the graph of co-location groups: per-device compute
// times and memory, and the bytes each group sends another.
type partitionGraph struct {
	s     *Simulator
	times [][]float64 // [group][device]
	mem   []int64
	edges []groupEdge
	load  []float64 // scratch
	used  []int64   // scratch
}

func newPartitionGraph(s *Simulator) *partitionGraph {
	pg := &partitionGraph{s: s, times: groupTimes(s), mem: make([]int64, len(s.g.Groups)),
		load: make([]float64, len(s.devs)), used: make([]int64, len(s.devs))}
	type key struct{ op, group int }
	sent := map[key]bool{}
	for v, op := range s.g.Ops {
		pg.mem[op.Group] += op.Mem
		for _, next := range op.NextStep {
			if to := s.g.Ops[next].Group; to != op.Group && !sent[key{v, to}] {
				sent[key{v, to}] = true
				pg.edges = append(pg.edges, groupEdge{op.Group, to, op.Out})
			}
		}
		for _, in := range op.Inputs {
			from := s.g.Ops[in].Group
			if from == op.Group || sent[key{in, op.Group}] {
				continue
			}
			sent[key{in, op.Group}] = true
			pg.edges = append(pg.edges, groupEdge{from, op.Group, s.g.Ops[in].Out})
		}
	}
	return pg
}

// contiguous splits the groups in order over devs, each device taking a
// share of the total time (on the fastest device) proportional to its speed.
func (pg *partitionGraph) contiguous(devs []int) []int {
	G := len(pg.times)
	ref := devs[0]
	var total, speed float64
	for g := range G {
		total += pg.times[g][ref]
	}
	for _, d := range devs {
		speed += pg.s.devs[d].PeakFLOPS
	}
	assign := make([]int, G)
	part, acc := 0, 0.0
	limit := total * pg.s.devs[devs[0]].PeakFLOPS / speed
	for g := range G {
		if acc >= limit && part < len(devs)-1 {
			part++
			limit += total * pg.s.devs[devs[part]].PeakFLOPS / speed
		}
		assign[g] = devs[part]
		acc += pg.times[g][ref]
	}
	return assign
}

// grown fills one device after the other with the groups reached
// breadth-first (edges in either direction) from the first unassigned
// group, until the device has its speed's share of the total time.
func (pg *partitionGraph) grown(devs []int) []int {
	G := len(pg.times)
	adj := make([][]int, G)
	for _, e := range pg.edges {
		adj[e.from] = append(adj[e.from], e.to)
		adj[e.to] = append(adj[e.to], e.from)
	}
	ref := devs[0]
	var total, speed float64
	for g := range G {
		total += pg.times[g][ref]
	}
	for _, d := range devs {
		speed += pg.s.devs[d].PeakFLOPS
	}
	assign := slices.Repeat([]int{-1}, G)
	next := 0 // lowest group that may be unassigned
	for part, d := range devs {
		share := total * pg.s.devs[d].PeakFLOPS / speed
		last := part == len(devs)-1
		acc := 0.0
		var queue []int
		for acc < share || last {
			if len(queue) == 0 {
				for next < G && assign[next] >= 0 {
					next++
				}
				if next == G {
					break
				}
				queue = append(queue, next)
				assign[next] = d
			}
			g := queue[0]
			queue = queue[1:]
			acc += pg.times[g][ref]
			for _, h := range adj[g] {
				if assign[h] < 0 {
					assign[h] = d
					queue = append(queue, h)
				}
			}
		}
		for _, g := range queue { // reached but over the share: back to the pool
			assign[g] = -1
		}
		next = 0
	}
	return assign
}

// objective is the partition's estimated step: the largest device load
// plus the cut's transfer times, times OOMPenalty when memory overflows.
func (pg *partitionGraph) objective(assign []int) float64 {
	clear(pg.load)
	clear(pg.used)
	for g, d := range assign {
		pg.load[d] += pg.times[g][d]
		pg.used[d] += pg.mem[g]
	}
	cut := 0.0
	for _, e := range pg.edges {
		if a, b := assign[e.from], assign[e.to]; a != b {
			cut += pg.s.transfer(e.bytes, a, b)
		}
	}
	est := slices.Max(pg.load) + cut
	for d, u := range pg.used {
		if u > int64(pg.s.devs[d].Memory) {
			return est * OOMPenalty
		}
	}
	return est
}

// refine moves single groups to other devices while that lowers the
// objective, the best move per group, in passes over the groups.
func (pg *partitionGraph) refine(assign []int) {
	cur := pg.objective(assign)
	for pass := 0; pass < 100; pass++ {
		improved := false
		for g := range assign {
			was, bestDev, bestObj := assign[g], assign[g], cur
			for d := range pg.s.devs {
				if d == was {
					continue
				}
				assign[g] = d
				if o := pg.objective(assign); o < bestObj*(1-1e-9) {
					bestDev, bestObj = d, o
				}
			}
			assign[g] = bestDev
			if bestDev != was {
				cur, improved = bestObj, true
			}
		}
		if !improved {
			return
		}
	}
}
