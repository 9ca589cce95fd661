package coord

import (
	"fmt"
	"net"
	"slices"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/sched"
)

// neverPlaceable is a placement error that waiting for nodes cannot cure.
type neverPlaceable struct{ error }

func (e neverPlaceable) Unwrap() error { return e.error }

// replica is one data-parallel copy of a stage: a node and the units of it
// the replica uses.
type replica struct {
	node  *node
	units int
	batch int
}

// placement is where a plan runs: the replicas of each stage and the node
// of each parameter-server shard.
type placement struct {
	stages [][]replica
	ps     []*node
}

// cluster is what placement sees of the registry (Coordinator.cluster).
type cluster struct {
	live []*node
	busy map[*node]bool
	load map[*node]int
	// slots, with the allocator on, is each node's units less one per
	// stage task it hosts (alloc_place.go); nil: nodes are not shared.
	slots map[*node]int
}

// place puts plan's stages on free live nodes of their types and its
// parameter-server shards on CPU-type nodes (rules in package api's doc).
// With plain set every chosen node must have a loopback data address.
func place(plan *sched.Plan, batch int, cl cluster, plain bool) (*placement, error) {
	pl := &placement{}
	used := map[*node]bool{}
	for i, s := range plan.Stages {
		reps, err := placeStage(i, s, cl, used)
		if err != nil {
			return nil, err
		}
		if err := splitBatch(i, batch, reps); err != nil {
			return nil, err
		}
		pl.stages = append(pl.stages, reps)
	}
	ps, err := placePS(max(1, plan.PSCores), cl, used)
	if err != nil {
		return nil, err
	}
	pl.ps = ps
	if plain {
		if err := pl.checkLoopback(); err != nil {
			return nil, neverPlaceable{err}
		}
	}
	return pl, nil
}

// placeStage takes free nodes of the stage's type, largest offer first,
// until the stage has its units.
func placeStage(i int, s sched.Stage, cl cluster, used map[*node]bool) ([]replica, error) {
	var cands []*node
	for _, n := range cl.live {
		if n.req.Type == s.Type && !cl.busy[n] && !used[n] {
			cands = append(cands, n)
		}
	}
	slices.SortStableFunc(cands, func(a, b *node) int { return cl.offer(b) - cl.offer(a) })
	need := s.Units
	var reps []replica
	for _, n := range cands {
		if need == 0 {
			break
		}
		u := min(n.stageUnits(), need)
		reps = append(reps, replica{node: n, units: u})
		need -= u
	}
	if need > 0 {
		return nil, fmt.Errorf("stage %d (%s) needs %d units of type %s; free live nodes offer %d",
			i, layerRange(s), s.Units, s.Type, s.Units-need)
	}
	for _, r := range reps {
		used[r.node] = true
	}
	return reps, nil
}

func layerRange(s sched.Stage) string {
	if s.First == s.Last {
		return fmt.Sprintf("layer %d", s.First)
	}
	return fmt.Sprintf("layers %d-%d", s.First, s.Last)
}

// splitBatch gives each replica a share of the batch proportional to its
// units, the remainder to the first replicas.
func splitBatch(stage, batch int, reps []replica) error {
	total := 0
	for _, r := range reps {
		total += r.units
	}
	given := 0
	for k := range reps {
		reps[k].batch = batch * reps[k].units / total
		given += reps[k].batch
	}
	for k := 0; given < batch; k++ {
		reps[k%len(reps)].batch++
		given++
	}
	for k, r := range reps {
		if r.batch == 0 {
			return fmt.Errorf("stage %d: batch %d is too small for %d replicas (replica %d would get no samples)", stage, batch, len(reps), k)
		}
	}
	return nil
}

// placePS puts each shard on a CPU-type live node: one that hosts a stage
// replica of this placement if any does (its worker then calls the shard
// in-process, which measured 30% more throughput for ctrdnn on one machine),
// else any; among them the one with the fewest tasks (this placement's
// included), earliest registered first.
func placePS(shards int, cl cluster, used map[*node]bool) ([]*node, error) {
	load := map[*node]int{}
	var cpus, hosts []*node
	for _, n := range cl.live {
		if n.kind == config.KindCPU {
			cpus = append(cpus, n)
			load[n] = cl.load[n]
			if used[n] {
				load[n]++
				hosts = append(hosts, n)
			}
		}
	}
	if len(hosts) > 0 {
		cpus = hosts
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("the plan needs %d parameter-server shard(s) on CPU-type nodes; no live node offers a CPU type", shards)
	}
	ps := make([]*node, shards)
	for k := range ps {
		n := slices.MinFunc(cpus, func(a, b *node) int { return load[a] - load[b] })
		ps[k] = n
		load[n]++
	}
	return ps, nil
}

func (pl *placement) checkLoopback() error {
	check := func(n *node) error {
		for _, addr := range []string{n.req.DataAddr, n.psAddr()} {
			host, _, _ := net.SplitHostPort(addr)
			ip := net.ParseIP(host)
			if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				return fmt.Errorf("%s is not on loopback: the plain data plane is for loopback only; configure a cluster secret", n.describe())
			}
		}
		return nil
	}
	for _, reps := range pl.stages {
		for _, r := range reps {
			if err := check(r.node); err != nil {
				return err
			}
		}
	}
	for _, n := range pl.ps {
		if err := check(n); err != nil {
			return err
		}
	}
	return nil
}
