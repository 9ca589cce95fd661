package coord

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/batching"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/store"
)

// Heterogeneity-aware batching. A job's data-parallel stage splits its
// batch over its replicas in proportion to their units (uniform), to their
// expected throughput when it is placed (variable: units times the node's
// CPU share), or to their measured throughput (dynamic): the replicas
// report their busy time per step (reading input and computing, not
// waiting), and every Interval reports the controller of package batching
// sets b_k <- b_k * tbar / t_k within the global batch and the bounds,
// which reaches the replicas at a step boundary through an elastic resize
// (or, with batching.resize = "restart", by restarting the job from its
// newest checkpoint with the new batches: batchrestart.go). Auto is
// dynamic when the replicas differ in units or CPU share, uniform
// otherwise (equal replicas stay bit-for-bit reproducible).
//
// What is balanced are lanes (lanes.go): the replicas of a single-stage
// job, BSP or ASP, or lane j of a pipeline whose stages have R replicas or
// one. In ASP the replicas run at their own steps; each applies a new
// split from its own next step, and the controller observes whenever the
// slowest replica has a new step.

// jobBalance is a job's batching state.
type jobBalance struct {
	mode        string
	reason      string // why batching is uniform when it cannot be otherwise
	shape       laneShape
	ctl         *batching.Controller // dynamic only
	lastStep    int64
	adjustments int
	restarts    int // kill-restart resizes so far (its restart chain's)
	decision    json.RawMessage
}

// batchingMode resolves the job file's mode for a placement whose stages
// form lanes shape.
func batchingMode(jf *config.Job, pl *placement, shape laneShape) string {
	mode := jf.Batching.Mode
	if mode != config.BatchingAuto {
		return mode
	}
	for _, i := range shape.wide {
		reps := pl.stages[i]
		for _, r := range reps[1:] {
			if r.units != reps[0].units || shareOf(r.node) != shareOf(reps[0].node) {
				return config.BatchingDynamic
			}
		}
	}
	return config.BatchingUniform
}

// newBalance sets up j's batching for its placement; in variable mode it
// also gives the lanes batches in proportion to units times CPU share (the
// lane's slowest replica's), and a job restarted to resize its batches
// gets the batches carry, if not nil, hands on. Each lane's batch is
// bounded by what the memory of its replicas' nodes holds.
func newBalance(j *job, pl *placement, carry *batchCarry) *jobBalance {
	shape := lanesOf(replicaCounts(pl))
	if shape.lanes == 0 {
		return &jobBalance{mode: config.BatchingUniform, reason: shape.why}
	}
	jf := j.file
	b := &jobBalance{mode: batchingMode(jf, pl, shape), shape: shape}
	if carry != nil && carry.mode != "" {
		b.mode = carry.mode
	}
	if b.mode == config.BatchingUniform {
		if jf.Batching.Mode == config.BatchingAuto {
			b.reason = "auto: the replicas are alike in units and CPU share"
		}
		return b
	}
	bc := jf.Batching
	minBatch := bc.MinBatch
	if len(pl.stages) > 1 {
		minBatch = max(minBatch, jf.MicroBatches) // a lane needs a row of every micro-batch
	}
	maxes := laneMaxes(j, pl, shape, minBatch)
	lanes := batchesOf(pl.stages[shape.wide[0]])
	if b.mode == config.BatchingVariable {
		if split, err := batching.Split(jf.Batch, laneWeights(pl, shape), minBatches(shape.lanes, minBatch), maxes); err == nil {
			lanes = split
		}
	}
	if b.mode == config.BatchingDynamic {
		b.ctl, _ = batching.NewController(batching.Config{Interval: int(bc.Interval), Smoothing: bc.Smoothing,
			Deadband: bc.Deadband, MinBatch: minBatch, MaxBatch: maxes}) // the job file's bounds are validated
	}
	if c := carry; c != nil {
		b.adjustments, b.restarts = c.adjustments, c.restarts
		if carried, ok := c.lanesFor(pl, shape, jf.Batch); ok {
			lanes = carried
		}
		if c.ctl != nil && b.ctl != nil {
			b.ctl = c.ctl // its history resets itself: the restored run's steps go back
		}
	}
	setLanes(pl, shape, lanes)
	return b
}

// maxBatchFor is the largest batch, up to the job's, whose estimate of
// stage i (nn.EstimateStage: parameters, optimiser state, activations, the
// batch's rows) fits in memory bytes; the job's batch when the node
// reports no memory.
func maxBatchFor(j *job, i int, memory int64) int {
	if memory <= 0 || j.model == nil || j.plan == nil || i >= len(j.plan.Stages) {
		return j.file.Batch
	}
	s := j.plan.Stages[i]
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

// balanceJobs feeds the dynamic controllers the lanes' latest step times
// and rebalances the jobs they adjust. c.mu is held.
func (c *Coordinator) balanceJobs() {
	for _, j := range c.jobs {
		if j.balance != nil && j.balance.ctl != nil && canRebalance(j) == "" {
			c.balance(j)
		}
	}
}

// balance observes j's lanes once every replica of them has reported a
// step time, at the fewest steps any has reported, and applies a new
// split: in place, or by a restart from the newest checkpoint.
func (c *Coordinator) balance(j *job) {
	b := j.balance
	obs, ok := observeLanes(j, b.shape)
	if !ok || len(obs.ids) < 2 || obs.step <= b.lastStep {
		return
	}
	b.lastStep = obs.step
	next, changed, why := b.ctl.Observe(obs.step, obs.ids, obs.batches, obs.seconds)
	b.decision, _ = json.Marshal(why) // a decision holds finite numbers and strings
	if !changed || slices.Equal(next, obs.current) {
		return
	}
	b.adjustments++
	if j.file.Batching.Resize == config.ResizeRestart {
		c.restartForBatches(j, next)
		return
	}
	var from int64
	if len(j.plan.Stages) == 1 {
		from = c.resize(j, obs.ids, next)
	} else {
		from = c.resizeLanes(j, next)
	}
	c.log.Info("job rebalanced", "job", j.id, "lanes", obs.ids, "batches", next, "from_step", from, "seconds", obs.seconds)
}

// reshapeBalance sets j's batching up again for the replicas its single
// stage has now, after a change of members (a shrink or a grow): the
// controller starts afresh on the new replicas (its history and each
// node's memory bound were the old ones'), the counts go on. The batches
// stay as the change set them. c.mu is held.
func reshapeBalance(j *job) {
	if j.balance == nil || j.plan == nil || len(j.plan.Stages) != 1 {
		return
	}
	pl, ok := placementOfTasks(j)
	if !ok {
		return // not placed: nothing to balance
	}
	old := j.balance
	j.balance = newBalance(j, pl, nil)
	j.balance.adjustments, j.balance.restarts = old.adjustments, old.restarts
}

// restoreBalance sets up the batching of j, a running job taken up from
// the state database, once every stage task of it is bound to its node
// again: the batches stay as its tasks run them, the mode is the one its
// record kept (auto is not resolved again: a job whose shares have evened
// out meanwhile would keep its unequal batches with no controller), a
// dynamic controller starts afresh, the counts go on from the record.
// Until then j has no balance, so nothing resizes it. c.mu is held.
func restoreBalance(j *job) {
	if j.balance != nil || j.plan == nil || j.state != api.JobRunning {
		return
	}
	pl, ok := placementOfTasks(j)
	if !ok {
		return
	}
	var carry *batchCarry
	if h := j.heldBatching; h != nil {
		carry = &batchCarry{mode: h.Mode, adjustments: h.Adjustments, restarts: h.Restarts}
	}
	j.balance = newBalance(j, pl, carry)
	j.heldBatching = nil
}

// placementOfTasks is the placement j's stage tasks run: each stage's
// replicas in replica order, with their nodes, units and batches. false
// while a task is bound to no node or names a stage the plan lacks.
func placementOfTasks(j *job) (*placement, bool) {
	pl := &placement{stages: make([][]replica, len(j.plan.Stages))}
	for _, t := range stageRuns(j) {
		if t.node == nil || t.task.Stage < 0 || t.task.Stage >= len(pl.stages) {
			return nil, false
		}
		pl.stages[t.task.Stage] = append(pl.stages[t.task.Stage], replica{node: t.node, units: t.task.Units, batch: t.task.Batch})
	}
	return pl, true
}

// batchingRecord is what j's record keeps of its batching (nil: nothing).
func (j *job) batchingRecord() *store.Batching {
	var r store.Batching
	switch {
	case j.balance != nil:
		r.Mode, r.Adjustments, r.Restarts = j.balance.mode, j.balance.adjustments, j.balance.restarts
	case j.heldBatching != nil:
		r.Mode, r.Adjustments, r.Restarts = j.heldBatching.Mode, j.heldBatching.Adjustments, j.heldBatching.Restarts
	}
	if c := j.resizeTo; c != nil {
		r.ResizeLanes, r.ResizeByNode = slices.Clone(c.lanes), maps.Clone(c.byNode)
	}
	if r.Mode == "" && r.ResizeLanes == nil {
		return nil
	}
	return &r
}

// takeBatching takes up a job record's batching r (nil: none): its counts
// until the job's balance is set up again, and the batches a job
// restarting to resize them restarts with.
func (j *job) takeBatching(r *store.Batching) error {
	if r == nil {
		return nil
	}
	switch r.Mode {
	case "", config.BatchingUniform, config.BatchingVariable, config.BatchingDynamic:
	default:
		return fmt.Errorf("mode %q: not a mode batching resolves to", r.Mode)
	}
	if r.Adjustments < 0 || r.Restarts < 0 {
		return fmt.Errorf("adjustments %d, restarts %d: counts cannot be negative", r.Adjustments, r.Restarts)
	}
	for _, b := range append(slices.Collect(maps.Values(r.ResizeByNode)), r.ResizeLanes...) {
		if b < 1 {
			return fmt.Errorf("resize batches %v (by node %v): a batch must be at least 1", r.ResizeLanes, r.ResizeByNode)
		}
	}
	j.heldBatching = r
	if len(r.ResizeLanes) > 0 {
		j.resizeTo = &batchCarry{lanes: r.ResizeLanes, byNode: r.ResizeByNode, adjustments: r.Adjustments, restarts: r.Restarts}
	}
	return nil
}

// status is the batching part of a job's status. c.mu is held.
func (b *jobBalance) status() *api.BatchingStatus {
	if b == nil {
		return nil
	}
	return &api.BatchingStatus{Mode: b.mode, Adjustments: b.adjustments, Decision: b.decision, Reason: b.reason,
		Restarts: b.restarts, Lanes: b.shape.lanes}
}

// canRebalance reports why j's batches cannot change now, or "".
func canRebalance(j *job) string {
	switch {
	case j.state != api.JobRunning:
		return fmt.Sprintf("job %s is %s, not running", j.id, j.state)
	case j.plan == nil || j.balance == nil:
		return fmt.Sprintf("job %s is not placed", j.id)
	case j.balance.shape.lanes == 0:
		return j.balance.reason
	case j.joining():
		return fmt.Sprintf("replicas join job %s at step %d", j.id, j.joinStep())
	}
	return ""
}
