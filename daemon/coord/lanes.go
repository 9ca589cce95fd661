package coord

import (
	"fmt"
	"slices"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// Lanes (see package pipeline's doc). When every stage of a job has either
// R replicas or one (R >= 2), lane k is replica k of each stage with R
// replicas ("wide" stages), and lane k's batch is the batch of each of
// them; a stage of one replica takes the whole batch, and where it feeds a
// wide stage it splits its rows into the lane batches (api.Task
// NextBatches). The controller balances lanes on the lane time t_k, the
// largest busy time per step of lane k's replicas: a lane runs at its
// slowest stage. A single-stage job with R replicas is R lanes of one
// stage. Other shapes keep uniform batches, and the status says why.

// laneShape is a placement's stages seen as lanes.
type laneShape struct {
	lanes int   // R; 0 when the stages do not form lanes
	wide  []int // the stages with R replicas, ascending
	why   string
}

// lanesOf finds the lanes of stages with counts replicas.
func lanesOf(counts []int) laneShape {
	r := 0
	if len(counts) > 0 {
		r = slices.Max(counts)
	}
	if r < 2 {
		return laneShape{why: "every stage has one replica: nothing to balance"}
	}
	var wide []int
	for i, n := range counts {
		switch n {
		case r:
			wide = append(wide, i)
		case 1:
		default:
			return laneShape{why: fmt.Sprintf("stages have %v replicas: batches are balanced by lanes only when every stage has either %d replicas or one", counts, r)}
		}
	}
	return laneShape{lanes: r, wide: wide}
}

func (s laneShape) isWide(stage int) bool { return slices.Contains(s.wide, stage) }

func replicaCounts(pl *placement) []int {
	out := make([]int, len(pl.stages))
	for i, reps := range pl.stages {
		out[i] = len(reps)
	}
	return out
}

func batchesOf(reps []replica) []int {
	out := make([]int, len(reps))
	for k, r := range reps {
		out[k] = r.batch
	}
	return out
}

// setLanes gives replica k of every wide stage lanes[k].
func setLanes(pl *placement, shape laneShape, lanes []int) {
	for _, i := range shape.wide {
		for k := range pl.stages[i] {
			pl.stages[i][k].batch = lanes[k]
		}
	}
}

// laneMaxes bounds each lane's batch by the memory of its replicas' nodes.
func laneMaxes(j *job, pl *placement, shape laneShape, minBatch int) []int {
	maxes := make([]int, shape.lanes)
	for k := range maxes {
		maxes[k] = j.file.Batch
		for _, i := range shape.wide {
			maxes[k] = min(maxes[k], maxBatchFor(j, i, pl.stages[i][k].node.req.MemoryBytes))
		}
		maxes[k] = max(maxes[k], minBatch)
	}
	return maxes
}

// laneWeights is each lane's expected speed for variable batching: the
// least units x CPU share of its replicas.
func laneWeights(pl *placement, shape laneShape) []float64 {
	w := make([]float64, shape.lanes)
	for k := range w {
		for n, i := range shape.wide {
			r := pl.stages[i][k]
			if x := float64(r.units) * shareOf(r.node); n == 0 || x < w[k] {
				w[k] = x
			}
		}
	}
	return w
}

// laneTaskBatches sets a stage task's Batches (every replica's batch, when
// the stage has several) and, for a stage of one replica that feeds a
// wide stage whose batches the controller sets, NextBatches.
func laneTaskBatches(t *api.Task, pl *placement, b *jobBalance) {
	i := t.Stage
	if len(pl.stages[i]) > 1 {
		t.Batches = batchesOf(pl.stages[i])
	}
	if b != nil && b.shape.lanes > 0 && b.mode != config.BatchingUniform && len(pl.stages[i]) == 1 && b.shape.isWide(i+1) {
		t.NextBatches = batchesOf(pl.stages[i+1])
	}
}

// laneObservation is one report of every lane: ids and batches as run
// (the first wide stage's), the batches assigned, the lane times and the
// fewest steps any replica of a lane has reported.
type laneObservation struct {
	ids, batches, current []int
	seconds               []float64
	step                  int64
}

// observeLanes gathers j's lanes from the latest reports; false until every
// replica of a wide stage has measured a step.
func observeLanes(j *job, shape laneShape) (laneObservation, bool) {
	o := laneObservation{step: -1}
	pos := map[int]int{}
	for _, t := range j.tasks {
		if t.task.Role != api.RoleStage || !shape.isWide(t.task.Stage) {
			continue
		}
		r := t.report
		if r.StepSeconds <= 0 || r.Batch <= 0 {
			return o, false
		}
		k := pos[t.task.Stage]
		pos[t.task.Stage]++
		if t.task.Stage == shape.wide[0] {
			o.ids, o.batches, o.current = append(o.ids, t.task.Replica), append(o.batches, r.Batch), append(o.current, t.task.Batch)
			o.seconds = append(o.seconds, r.StepSeconds)
		} else if k < len(o.seconds) {
			o.seconds[k] = max(o.seconds[k], r.StepSeconds)
		} else {
			return o, false
		}
		if o.step < 0 || r.Step < o.step {
			o.step = r.Step
		}
	}
	return o, true
}

// resizeLanes gives the lanes of a multi-stage job new batches from one
// step: each wide stage's replicas their lane's batch, each stage of one
// replica that feeds a wide stage the lanes to split its rows by. In BSP
// the step is ahead of every replica, as rebatch's, so that every stage
// takes the change at that one step: replicas of a wide stage 0 then shard
// the same data segment (one taking it a step later than its partners
// would read some records twice and skip others), and a stage of one
// replica splits its rows as its partners expect them. In ASP, whose
// replicas may be many steps apart, it is stage 0's next (a stage that has
// taken that step already applies the change from its next; the servers
// weigh by the rows pushed, so a step split across the change is still
// trained right). Members never change. c.mu is held.
func (c *Coordinator) resizeLanes(j *job, lanes []int) int64 {
	shape := j.balance.shape
	from := stageZerosNext(j)
	if j.file.Mode == api.ModeBSP {
		from = c.stepAheadOfEveryReplica(j)
	}
	j.gen++
	members := make([]int, shape.lanes)
	for k := range members {
		members[k] = k
	}
	for _, t := range j.tasks {
		if t.task.Role != api.RoleStage {
			continue
		}
		switch i := t.task.Stage; {
		case shape.isWide(i):
			t.task.Members, t.task.Batches, t.task.Batch = slices.Clone(members), slices.Clone(lanes), lanes[t.task.Replica]
		case t.task.Replicas == 1 && shape.isWide(i+1):
			t.task.Members, t.task.Batches, t.task.NextBatches = []int{t.task.Replica}, []int{t.task.Batch}, slices.Clone(lanes)
		default:
			continue
		}
		t.task.Generation, t.task.FromStep = j.gen, from
	}
	c.save(j)
	c.wake()
	return from
}

// stageZerosNext is the step after the furthest any replica of j's stage 0
// has reported.
func stageZerosNext(j *job) int64 {
	from := j.firstStep() + 1
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage && t.task.Stage == 0 {
			from = max(from, t.report.Step+1)
		}
	}
	return from
}
