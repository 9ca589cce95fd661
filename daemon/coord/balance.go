package coord

import (
	"encoding/json"
	"slices"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/batching"
	"github.com/heterps/heterps/daemon/nn"
)

// Heterogeneity-aware batching. A job's data-parallel stage splits its
// batch over its replicas in proportion to their units (uniform), to their
// expected throughput when it is placed (variable: units times the node's
// CPU share), or to their measured throughput (dynamic): the replicas
// report their busy time per step (reading input and computing, not
// waiting), and every Interval reports the controller of package batching
// sets b_k <- b_k * tbar / t_k within the global batch and the bounds,
// which reaches the replicas at a step boundary through an elastic resize.
// Auto is dynamic when the stage's replicas differ in units or CPU share,
// uniform otherwise (equal replicas stay bit-for-bit reproducible).

// jobBalance is a job's batching state.
type jobBalance struct {
	mode        string
	ctl         *batching.Controller // dynamic only
	lastStep    int64
	adjustments int
	decision    json.RawMessage
}

// batchingMode resolves the job file's mode for a placement of its stage
// replicas.
func batchingMode(jf *config.Job, reps []replica) string {
	mode := jf.Batching.Mode
	if mode != config.BatchingAuto {
		return mode
	}
	for _, r := range reps[1:] {
		if r.units != reps[0].units || shareOf(r.node) != shareOf(reps[0].node) {
			return config.BatchingDynamic
		}
	}
	return config.BatchingUniform
}

// newBalance sets up j's batching for its placement; in variable mode it
// also gives the replicas batches in proportion to units times CPU share.
// Each replica's batch is bounded by what its node's memory holds.
func newBalance(j *job, pl *placement) *jobBalance {
	jf := j.file
	if len(pl.stages) != 1 || len(pl.stages[0]) < 2 {
		return &jobBalance{mode: config.BatchingUniform}
	}
	reps := pl.stages[0]
	b := &jobBalance{mode: batchingMode(jf, reps)}
	bc := jf.Batching
	maxes := make([]int, len(reps))
	for k, r := range reps {
		maxes[k] = max(bc.MinBatch, maxBatchFor(j, r.node.req.MemoryBytes))
	}
	switch b.mode {
	case config.BatchingVariable:
		weights := make([]float64, len(reps))
		for k, r := range reps {
			weights[k] = float64(r.units) * shareOf(r.node)
		}
		if split, err := batching.Split(jf.Batch, weights, minBatches(len(reps), bc.MinBatch), maxes); err == nil {
			for k := range reps {
				reps[k].batch = split[k]
			}
		}
	case config.BatchingDynamic:
		b.ctl, _ = batching.NewController(batching.Config{Interval: int(bc.Interval), Smoothing: bc.Smoothing,
			Deadband: bc.Deadband, MinBatch: bc.MinBatch, MaxBatch: maxes}) // the job file's bounds are validated
	}
	return b
}

// maxBatchFor is the largest batch, up to the job's, whose stage estimate
// (nn.EstimateStage: parameters, optimiser state, activations, the
// batch's rows) fits in memory bytes; the job's batch when the node
// reports no memory.
func maxBatchFor(j *job, memory int64) int {
	if memory <= 0 || j.model == nil || j.plan == nil || len(j.plan.Stages) != 1 {
		return j.file.Batch
	}
	s := j.plan.Stages[0]
	micro := max(1, j.file.MicroBatches)
	fits := func(b int) bool {
		need, err := nn.EstimateStage(j.model, s.First, s.Last, b, min(micro, b))
		return err == nil && need <= memory
	}
	lo, hi := 0, j.file.Batch // fits(lo) or lo == 0; the answer is in [lo, hi]
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func shareOf(n *node) float64 {
	share, _ := n.share()
	return share
}

func minBatches(n, min int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = min
	}
	return out
}

// balanceJobs feeds the dynamic controllers the replicas' latest step
// times and resizes the stages they rebalance. c.mu is held.
func (c *Coordinator) balanceJobs() {
	for _, j := range c.jobs {
		if j.balance != nil && j.balance.ctl != nil && canResize(j) == "" {
			c.balance(j)
		}
	}
}

// balance observes j's stage once every replica has reported a step time
// since the last observation.
func (c *Coordinator) balance(j *job) {
	var ids, batches, current []int
	var seconds []float64
	step := int64(-1)
	for _, t := range j.tasks {
		if t.task.Role != api.RoleStage {
			continue
		}
		r := t.report
		if r.StepSeconds <= 0 || r.Batch <= 0 {
			return // not every replica has measured a step yet
		}
		ids, batches, current = append(ids, t.task.Replica), append(batches, r.Batch), append(current, t.task.Batch)
		seconds = append(seconds, r.StepSeconds)
		if step < 0 || r.Step < step {
			step = r.Step
		}
	}
	b := j.balance
	if len(ids) < 2 || step <= b.lastStep {
		return
	}
	b.lastStep = step
	next, changed, why := b.ctl.Observe(step, ids, batches, seconds)
	b.decision, _ = json.Marshal(why) // a decision holds finite numbers and strings
	if !changed || slices.Equal(next, current) {
		return
	}
	b.adjustments++
	from := c.resize(j, ids, next)
	c.log.Info("job rebalanced", "job", j.id, "replicas", ids, "batches", next, "from_step", from, "seconds", seconds)
}

// status is the batching part of a job's status. c.mu is held.
func (b *jobBalance) status() *api.BatchingStatus {
	if b == nil {
		return nil
	}
	return &api.BatchingStatus{Mode: b.mode, Adjustments: b.adjustments, Decision: b.decision}
}
