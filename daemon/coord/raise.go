package coord

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// Moving a job back up to its throughput_limit. A restart that the free
// live nodes could not carry at its limit runs below it (planBelowLimit),
// and so does a stage that went on without a dead node's replicas
// (elastic.go: shrink). At each new complete checkpoint of such a job, and
// for a grow in place also when the cluster changes (raiseDue), the
// restarter plans it again at its limit, on its own units and the free
// live ones, avoiding the nodes that failed its chain until their
// suspicion expires (a node that dies and comes back at once would
// otherwise move the job up and down again). Where that plan is feasible,
// the nodes can host it and the rest of the run ends sooner on it — the restart's start-up and
// the steps since the checkpoint trained again included — the job
// restarts from the checkpoint onto it. That is a move, not a failure: it
// spends none of checkpoint.restarts, waits no backoff and avoids no node.
// A job waiting ahead of it in the queue would take the units it frees:
// then it stays. Under an allocation policy the allocator owns the units
// and nothing moves.

// raiseInput is what deciding a move back up needs, copied out under c.mu.
type raiseInput struct {
	j     *job
	gen   int64
	snap  *job // a copy of j with what planning reads (planFileOn)
	cat   *config.Catalog
	stage sched.Stage // the plan's first stage
	from  int64       // the checkpoint a restart restores
	step  int64       // where the job is
	cur   float64     // the current plan's throughput, samples/s
	units int         // a shrunk stage's units left (0: not shrunk), whose throughput cur becomes
	moveS float64     // the start-up a restart is charged, seconds
	// growOnly: no new checkpoint is evaluated, so only a grow in place
	// may move the job (from is 0).
	growOnly bool
}

// raiseDue returns what deciding a move back up needs when j runs below
// its throughput_limit and either has a complete checkpoint not yet
// evaluated, or the cluster changed (a node registered or died, a job
// ended, a node j avoided is no longer avoided) since j was last
// evaluated, at most once a raiseEvery. In the second case only a grow in
// place can take j up (growOnly), as a restart needs a new checkpoint: a
// stage that shrank grows back onto a node that comes back without
// waiting for its next checkpoint, or without checkpoints at all. c.mu is
// held.
func (c *Coordinator) raiseDue(j *job, now time.Time) (raiseInput, bool) {
	if j.state != api.JobRunning || !runsBelowLimit(j) || j.plan == nil || len(j.plan.Stages) == 0 || c.waitsAhead(j) {
		return raiseInput{}, false
	}
	cp := j.ckpt.latest
	newCheckpoint := cp != nil && cp.Step > j.raiseChecked
	expired := slices.ContainsFunc(j.suspects, func(s store.Suspect) bool { return !s.Until.After(now) && s.Until.After(j.raisedAt) })
	clusterChanged := (c.changes != j.raiseChanges || expired || j.retryGrow) && now.Sub(j.raisedAt) >= raiseEvery
	if !newCheckpoint && !clusterChanged {
		return raiseInput{}, false
	}
	j.raiseChanges, j.raisedAt, j.retryGrow = c.changes, now, false
	in := raiseInput{j: j, gen: j.gen, snap: j.planningCopy(), stage: j.plan.Stages[0], cur: j.plan.Throughput,
		moveS: j.file.Replan.MoveSeconds, cat: c.replanCatalog(j), growOnly: !newCheckpoint}
	if newCheckpoint {
		j.raiseChecked, in.from = cp.Step, cp.Step
	}
	in.step = atStep(j, in.from)
	if in.step >= j.file.TotalSteps() {
		return raiseInput{}, false // trained: nothing left to speed up
	}
	if r := j.replan; r != nil && r.moves > 0 {
		in.moveS = r.moveSeconds
	}
	if strings.HasPrefix(j.reason, shrunkBelow) {
		in.units = replicaUnits(j, nil)
	}
	return in, true
}

// raiseEvery spaces the evaluations of a job below its limit that the
// cluster's changes bring about (each plans the job).
const raiseEvery = 10 * time.Second

// atStep is where j is, its newest checkpoint being at step cp: the
// fewest steps its stage replicas reported, or cp if later. c.mu is held.
func atStep(j *job, cp int64) int64 {
	step, _, _ := measuredStages(j)
	return max(step, cp)
}

// replicaUnits is the units of j's stage replicas, leaving out those on
// node without (nil: none). c.mu is held.
func replicaUnits(j *job, without *node) int {
	n := 0
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage && (without == nil || t.node != without) {
			n += t.task.Units
		}
	}
	return n
}

// stageThroughputOn is the throughput stage s of j's plan is predicted to
// reach on units units of its type in cat: what a shrunk stage runs at.
// j is the job or its planningCopy.
func (c *Coordinator) stageThroughputOn(j *job, cat *config.Catalog, s sched.Stage, units int) (_ float64, err error) {
	defer c.recoverInto(&err, j.id, "pricing")
	p, _, err := jobProblem(c.planFile(j), j.model, cat, c.storedProfiles(j.model.Name))
	if err != nil {
		return 0, err
	}
	j.replan.correct(p)
	t, ok := p.TypeIndex(s.Type)
	if !ok {
		return 0, fmt.Errorf("type %s of its stage is not in the catalog", s.Type)
	}
	return p.StageThroughput(sched.Segment{First: s.First, Last: s.Last, Type: t, Units: units}), nil
}

// planningCopy is a copy of j holding what planning it reads, so that it
// can be planned without c.mu while j runs. c.mu is held.
func (j *job) planningCopy() *job {
	cp := &job{id: j.id, file: j.file, model: j.model}
	if j.replan != nil {
		cp.replan = &replanState{scales: maps.Clone(j.replan.scales)}
	}
	return cp
}

// waitsAhead reports whether a job ahead of j in the queue waits for
// units. c.mu is held.
func (c *Coordinator) waitsAhead(j *job) bool {
	for _, o := range c.jobs {
		if o != j && o.waiting() && o.seq < j.seq {
			return true
		}
	}
	return false
}

// raiseTick evaluates every job running below its throughput_limit that
// is due (raiseDue), planning without c.mu.
func (c *Coordinator) raiseTick(ctx context.Context, now time.Time) {
	if c.allocPolicy() != "" {
		return
	}
	c.mu.Lock()
	var due []raiseInput
	for _, j := range c.jobs {
		if in, ok := c.raiseDue(j, now); ok {
			due = append(due, in)
		}
	}
	c.mu.Unlock()
	for _, in := range due {
		var err error
		if in.units > 0 {
			in.cur, err = c.stageThroughputOn(in.snap, in.cat, in.stage, in.units)
		}
		var plan *sched.Plan
		if err == nil {
			plan, err = c.planWithin(ctx, in.snap, c.planFile(in.snap), in.snap.file.Method, in.cat)
		}
		c.mu.Lock()
		req, inPlace := c.raiseInPlace(in, plan, err)
		if !inPlace && !in.growOnly {
			c.applyRaise(in, plan, err, time.Now())
		}
		c.mu.Unlock()
		if inPlace {
			c.raiseByGrowing(in, req, plan)
		}
	}
}

// raiseByGrowing grows in.j by req (grow.go); if the coordinator refuses
// for now (tryAgain), it tries again at the next checkpoints, up to
// maxGrowWaits of them, and if it refuses for good or for longer, the job
// moves back up by a restart as it would have without it.
func (c *Coordinator) raiseByGrowing(in raiseInput, req api.ResizeRequest, plan *sched.Plan) {
	_, err := c.grow(in.j.id, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	j := in.j
	switch {
	case err == nil:
		j.growWaits, j.growRetries = 0, 0
		c.log.Info("job grows back up to its throughput_limit in place", "job", j.id, "throughput", plan.Throughput, "was", in.cur,
			"added", req.Add)
		return
	case isTryAgain(err) && in.growOnly && j.growRetries < maxGrowRetries:
		// Say, the shrink just before has not reached every replica: the
		// node that came may be the last change for a long time, and a job
		// without checkpoints has no other occasion.
		j.growRetries++
		j.retryGrow = true
		c.log.Info("not growing back up in place yet; trying again shortly", "job", j.id, "in", raiseEvery, "err", err)
		return
	case isTryAgain(err) && !in.growOnly && j.growWaits < maxGrowWaits: // say, the shrink just before has not reached every replica
		j.growWaits++
		c.log.Info("not growing back up in place yet; trying at the next checkpoint", "job", j.id, "err", err)
		return
	case in.growOnly:
		c.log.Info("not growing back up in place; trying again at the next checkpoint or change of the cluster", "job", j.id, "err", err)
		return
	}
	j.growWaits = 0
	c.log.Info("not growing back up in place; moving by a restart instead", "job", j.id, "err", err)
	c.applyRaise(in, plan, nil, time.Now())
}

// maxGrowRetries is how many grow-only evaluations in a row whose grow
// the coordinator refused for now are tried again a raiseEvery later
// without a change of the cluster (5 minutes of them).
const maxGrowRetries = 30

// maxGrowWaits is how many checkpoints in a row a move back up waits for
// a grow the coordinator refuses for now (replicas that report no data
// position, e.g. of an older heterpsd, never let it) before it restarts.
const maxGrowWaits = 2

// raiseInPlace returns the grow that takes j to plan without a restart,
// when there is one: plan is j's one stage with more units of its type,
// j's stage syncs through the parameter servers, and free nodes of the
// type that host none of j offer the units it lacks. c.mu is held.
func (c *Coordinator) raiseInPlace(in raiseInput, plan *sched.Plan, err error) (api.ResizeRequest, bool) {
	j := in.j
	if err != nil || plan == nil || !plan.Feasible || j.state != api.JobRunning || j.gen != in.gen || c.waitsAhead(j) ||
		canResize(j) != "" || syncsByAllreduce(j) || len(plan.Stages) != 1 {
		return api.ResizeRequest{}, false
	}
	want, cur := plan.Stages[0], j.plan.Stages[0]
	have := replicaUnits(j, nil)
	if want.Type != cur.Type || want.First != cur.First || want.Last != cur.Last || want.Units <= have {
		return api.ResizeRequest{}, false
	}
	added := c.freeReplicas(j, want, want.Units-have)
	if added == nil {
		return api.ResizeRequest{}, false
	}
	var reps []replica
	var req api.ResizeRequest
	for _, t := range stageRuns(j) {
		reps = append(reps, replica{units: t.task.Units})
		req.Replicas = append(req.Replicas, t.task.Replica)
	}
	reps = append(reps, added...)
	if splitBatch(0, j.file.Batch, reps) != nil {
		return api.ResizeRequest{}, false
	}
	for i, r := range reps {
		if i < len(req.Replicas) {
			req.Batches = append(req.Batches, r.batch)
		} else {
			req.Add = append(req.Add, api.NewReplica{Node: r.node.req.Name, Batch: r.batch})
		}
	}
	return req, true
}

// freeReplicas places units more units of stage s's type for j, as
// placement places a stage (placeStage: free live nodes that host none of
// j's stage replicas, largest offer first); each new replica takes its
// whole node, as a grow gives it (addReplicas). nil if they cannot.
// c.mu is held.
func (c *Coordinator) freeReplicas(j *job, s sched.Stage, units int) []replica {
	mine := map[*node]bool{}
	for _, t := range stageRuns(j) {
		mine[t.node] = true
	}
	s.Units = units
	reps, err := placeStage(0, s, c.cluster(j, true), mine)
	if err != nil {
		return nil
	}
	for i := range reps {
		reps[i].units = reps[i].node.stageUnits()
	}
	return reps
}

// applyRaise restarts the job onto plan if it meets the limit and pays,
// unless the job changed meanwhile. c.mu is held.
func (c *Coordinator) applyRaise(in raiseInput, plan *sched.Plan, err error, now time.Time) {
	j := in.j
	switch {
	case err != nil:
		c.log.Warn("planning a move back up to the throughput_limit", "job", j.id, "err", err)
		return
	case j.state != api.JobRunning || j.gen != in.gen || c.waitsAhead(j) || !plan.Feasible:
		return
	}
	if _, err := place(plan, j.file.Batch, c.cluster(j, true), c.plainDataPlane()); err != nil {
		// The restart would wait in the queue for a placement: better to
		// go on below the limit.
		c.log.Info("not moving back up to the throughput_limit: the nodes cannot host the plan", "job", j.id, "err", err)
		return
	}
	keep, move := raiseTimes(in, plan.Throughput, float64(j.file.Batch), j.file.TotalSteps())
	if move >= keep {
		c.log.Info("not moving back up to the throughput_limit: the rest of the run would not end sooner", "job", j.id,
			"step", in.step, "keep_s", keep, "move_s", move)
		return
	}
	c.log.Info("job moves back up to its throughput_limit", "job", j.id, "from_step", in.from, "throughput", plan.Throughput,
		"was", in.cur, "keep_s", keep, "move_s", move)
	c.startMove(j, fmt.Sprintf("moving back up to its throughput_limit: %.6g samples/s on %v units %v, from its newest checkpoint",
		plan.Throughput, plan.Assign, stageUnits(plan)), now)
}

// startMove sets j restarting from its newest checkpoint to move, not to
// recover: no restart spent, no backoff. c.mu is held.
func (c *Coordinator) startMove(j *job, reason string, now time.Time) {
	j.state, j.reason = api.JobRestarting, reason
	j.failedAt, j.notBefore, j.moving = now, now, true
	c.save(j)
	c.wake()
}

// planWithin plans snap (a planningCopy) as jf describes it on cat within
// the planning timeout, without c.mu.
func (c *Coordinator) planWithin(ctx context.Context, snap *job, jf *config.Job, method string, cat *config.Catalog) (*sched.Plan, error) {
	ctx, stop := context.WithTimeout(ctx, c.cfg.PlanTimeout)
	defer stop()
	return c.planFileOn(ctx, snap, jf, method, cat, false)
}

// raiseTimes is the seconds the rest of the run takes on the current
// plan and after a restart onto one of throughput x: the steps from the
// checkpoint trained again, plus the start-up.
func raiseTimes(in raiseInput, x, batch float64, total int64) (keep, move float64) {
	keep = math.Inf(1) // a stage predicted to reach nothing
	if in.cur > 0 {
		keep = float64(total-in.step) * batch / in.cur
	}
	move = float64(total-in.from)*batch/x + in.moveS
	return keep, move
}
