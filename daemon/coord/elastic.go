package coord

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/store"
)

// Elastic stages. The replicas of a data-parallel stage and their batch
// sizes may change at a step boundary without restarting the job: the
// coordinator gives the job a new generation, and every task of the job
// the new membership (api.Task Members, Batches, FromStep); the PS shards'
// BSP barrier and the gradient weights b_k / sum(b) follow it from that
// step, the open step included, and stage 0 re-shards its data from where
// the stage had got to. Today this serves two things: a job whose stage
// replica's node dies goes on with the other replicas when no PS shard was
// on that node (shrink), PATCH /v1/jobs/{id} sets a stage's replicas
// and batches (resize), and the same PATCH with added replicas grows the
// stage onto free nodes (grow.go). Jobs of one stage only, in BSP mode: changing the
// replicas of a stage that exchanges activations with another is not
// built yet. The batch controller (balance.go) also changes the batches
// of ASP jobs, where each replica applies them from its own next step,
// and of pipelines, by lanes (lanes.go: resizeLanes); neither changes
// members. A stage that syncs by allreduce changes its batches only
// (allreduceMembersFixed).

// canResize reports why j's replica set cannot change, or "".
func canResize(j *job) string {
	switch {
	case j.state != api.JobRunning:
		return fmt.Sprintf("job %s is %s, not running", j.id, j.state)
	case j.file.Mode != api.ModeBSP:
		return "only BSP jobs change replicas at a step boundary"
	case j.plan == nil || len(j.plan.Stages) != 1:
		return "only single-stage (data-parallel) jobs change replicas yet"
	}
	return ""
}

// shrink drops j's stage replicas on n, which died or is draining (cause
// says which, for the log and the job's reason), if the job can go on
// without them: the survivors take their share of the batch from the next
// step. Replicas still joining (grow.go) leave with them, having trained
// nothing: the job goes on as before the grow, less n's. It reports
// whether it did. c.mu is held.
func (c *Coordinator) shrink(j *job, n *node, now time.Time, cause string) bool {
	if canResize(j) != "" || syncsByAllreduce(j) {
		return false
	}
	var left []*taskRun
	gone, units := 0, 0
	for _, t := range j.tasks {
		switch {
		case t.node == n && t.task.Role == api.RolePS:
			return false // its shard's rows are lost: restart from a checkpoint
		case t.node == n:
			gone++
		case t.task.Role == api.RoleStage && !j.joins(t):
			left, units = append(left, t), units+t.task.Units
		}
	}
	if gone == 0 {
		return false
	}
	members, batches, ok := splitOver(j, left)
	if !ok {
		return false
	}
	c.markShrunk(j, n, units, now, cause)
	from := c.resize(j, members, batches) // records the job, its new plan included
	c.log.Warn("job goes on without a node's replicas", "job", j.id, "node", n.req.Name, "node_id", n.id, "cause", cause,
		"replicas", members, "batches", batches, "from_step", from)
	return true
}

// splitOver is the members and batches of j's stage when only the
// replicas left remain: the job's batch split over them by units. ok is
// false when none remain or the batch is too small for them.
func splitOver(j *job, left []*taskRun) (members, batches []int, ok bool) {
	if len(left) == 0 {
		return nil, nil, false
	}
	reps := make([]replica, len(left))
	members = make([]int, len(left))
	for i, t := range left {
		reps[i].units, members[i] = t.task.Units, t.task.Replica
	}
	if splitBatch(0, j.file.Batch, reps) != nil {
		return nil, nil, false
	}
	batches = make([]int, len(reps))
	for i, r := range reps {
		batches[i] = r.batch
	}
	return members, batches, true
}

// Causes of a shrink (shrink).
const (
	causeDied     = "died"
	causeDraining = "is draining"
)

// markShrunk notes that j, shrinking without the replicas on n to units
// units, runs on a plan of them (planOnUnits) and below its
// throughput_limit if they are predicted to fall short of it: its status
// says so, and n is suspect to it as to a restart, so that it moves back
// up (raise.go) onto other nodes, or onto n once n has stayed up. c.mu is
// held.
func (c *Coordinator) markShrunk(j *job, n *node, units int, now time.Time, cause string) {
	j.suspects = append(j.suspects, store.Suspect{Node: n.req.Name, Until: now.Add(c.cfg.SuspectFor)})
	c.planOnUnits(j, units, fmt.Sprintf("node %s %s", n.req.Name, cause))
}

// resize gives j's single stage the replicas members (replica ids, a
// subset of the current ones) with batches and returns the step it takes
// effect from. When members drop replicas, that is the fewest steps any
// member has reported: that step may still be open at the parameter
// servers (a removed replica never pushed it), and reports lag, so the
// change must reach it: a change from a step already applied takes effect
// at the open one, and each worker applies it from the first step whose
// input it has not read, replicas a step or two apart each from its own.
// A change of a BSP stage's batches alone is made exact instead (rebatch);
// an ASP stage's replicas may be many steps apart, and the slower would
// take a change ahead of the furthest only after those. Stage tasks not in
// members leave the job. c.mu is held.
func (c *Coordinator) resize(j *job, members, batches []int) int64 {
	if current, _ := currentShare(j); slices.Equal(current, members) && j.file.Mode == api.ModeBSP {
		return c.rebatch(j, members, batches)
	}
	from := int64(-1)
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage && slices.Contains(members, t.task.Replica) {
			step := max(t.report.Step, j.firstStep()+1)
			if from < 0 || step < from {
				from = step
			}
		}
	}
	c.changeMembers(j, members, batches, from, 0)
	return from
}

// rebatch gives j's stage replicas, members (its current ones), the
// batches batches from a step none of them has read the input of yet,
// rebatchMargin steps past the furthest any has reported. Every replica then takes the change at that one step
// and begins the new data segment at the same record, so that no record is
// read twice and none is skipped beyond the slower shards' few
// (pipeline.ShardedInput); the batch controller's changes, taken at
// whatever step each replica had read ahead to, read some records twice
// and skipped others at every adjustment. The members stay, so nothing
// waits on a replica that left. A change made while the last is still
// ahead of the replicas, far enough for it to reach them, takes the last
// one's step, so that changes in a row cannot put one another off. A
// replica the change reaches after it read that step's input (a heartbeat
// held up past the margin) takes it from its next step, as before. c.mu is
// held.
func (c *Coordinator) rebatch(j *job, members, batches []int) int64 {
	from := c.stepAheadOfEveryReplica(j)
	c.changeMembers(j, members, batches, from, 0)
	return from
}

// stepAheadOfEveryReplica is the step a change of batches alone starts at
// (rebatch, resizeLanes): rebatchMargin steps past the furthest step any
// stage replica of j has reported, or the pending change's step while that
// is still more than half the margin ahead. c.mu is held.
func (c *Coordinator) stepAheadOfEveryReplica(j *job) int64 {
	var furthest int64
	for _, t := range stageRuns(j) {
		furthest = max(furthest, t.report.Step)
	}
	margin := c.rebatchMargin(j)
	if ahead := j.changesAhead(); ahead > furthest+margin/2 {
		return ahead
	}
	return max(furthest, j.firstStep()) + margin
}

// rebatchHeartbeats is how many heartbeat intervals of steps ahead of the
// furthest replica a change of batches starts: one for the change to reach
// every node, one for the reports' lag; minRebatchSteps is the fewest
// steps (a replica reads the next step's input while a step runs).
const (
	rebatchHeartbeats = 2
	minRebatchSteps   = 8
)

// rebatchMargin is rebatchHeartbeats heartbeat intervals of steps at the
// stage's step rate (as growMargin counts it), at least minRebatchSteps.
// A grow leaves more (growHeartbeats): a grow that comes late is called
// off, a change of batches that comes late is only taken a step or two
// apart. c.mu is held.
func (c *Coordinator) rebatchMargin(j *job) int64 {
	steps := c.stepRate(j) * rebatchHeartbeats * c.cfg.HeartbeatInterval.Seconds()
	return max(minRebatchSteps, int64(math.Ceil(steps)))
}

// changesAhead is the step j's stage takes its latest change at while a
// replica has yet to complete it (a rebatch ahead of them all), else 0.
// Derived from the tasks, it outlives a coordinator restart with them.
// c.mu is held.
func (j *job) changesAhead() int64 {
	for _, t := range stageRuns(j) {
		if t.report.Step < t.task.FromStep {
			return t.task.FromStep
		}
	}
	return 0
}

// changeMembers gives every task of j a new generation with the stage's
// members and batches from step from, exact with its data from record
// dataStart when that is > 0 (grow.go), and drops the stage tasks not in
// members. c.mu is held.
func (c *Coordinator) changeMembers(j *job, members, batches []int, from, dataStart int64) {
	before, _ := currentShare(j)
	j.gen++
	kept := j.tasks[:0]
	j.hourly = 0
	for _, t := range j.tasks {
		at := slices.Index(members, t.task.Replica)
		if t.task.Role == api.RoleStage && at < 0 {
			continue
		}
		t.task.Generation, t.task.FromStep, t.task.DataStart = j.gen, from, dataStart
		t.task.Members, t.task.Batches = slices.Clone(members), slices.Clone(batches)
		if t.task.Role == api.RoleStage {
			t.task.Batch = batches[at]
			j.hourly += c.price(j.plan.Stages[0].Type) * float64(t.task.Units)
		} else {
			j.hourly += c.price(j.plan.PSType)
		}
		kept = append(kept, t)
	}
	clear(j.tasks[len(kept):])
	j.tasks = kept
	if !slices.Equal(before, members) {
		reshapeBalance(j)
	}
	c.save(j)
	c.wake()
}

// patch applies PATCH /v1/jobs/{id}: new replicas and batches for the
// job's stage, replicas added included (grow.go).
func (c *Coordinator) patch(id string, req api.ResizeRequest) (api.JobStatus, error) {
	if err := req.Validate(); err != nil {
		return api.JobStatus{}, badRequest("resize: %v", err)
	}
	if len(req.Add) > 0 {
		return c.grow(id, req)
	}
	c.mu.Lock()
	j, err := c.resizable(id, req)
	if err != nil {
		c.mu.Unlock()
		return api.JobStatus{}, err
	}
	from := c.resize(j, req.Replicas, req.Batches)
	c.log.Info("job resized", "job", id, "replicas", req.Replicas, "batches", req.Batches, "from_step", from, "generation", j.gen)
	return c.answerRecorded(j)
}

// answerRecorded is j's status once its record is on disk, so that a
// change the API has acknowledged outlives a coordinator killed right
// after; an error (503) if the record could not be written. c.mu is held
// on entry and released.
func (c *Coordinator) answerRecorded(j *job) (api.JobStatus, error) {
	s, saved := c.status(j, time.Now()), c.save(j)
	c.mu.Unlock()
	if err := saved(); err != nil {
		return api.JobStatus{}, httpErrorf(http.StatusServiceUnavailable,
			"job %s: changed, but not recorded in the state database (a restart of the coordinator now would undo the change): %v", j.id, err)
	}
	return s, nil
}

// resizable looks up the job a resize names and checks that it may take
// it now: running, one BSP stage, the replicas named its own, none still
// joining, the replicas unchanged for an allreduce stage. c.mu is held.
func (c *Coordinator) resizable(id string, req api.ResizeRequest) (*job, error) {
	j, err := c.knownJob(id)
	if err != nil {
		return nil, err
	}
	if why := canResize(j); why != "" {
		return nil, httpErrorf(http.StatusConflict, "resize job %s: %s", id, why)
	}
	if req.Stage != 0 {
		return nil, badRequest("resize: job %s has one stage, 0; got stage %d", id, req.Stage)
	}
	if j.joining() {
		return nil, httpErrorf(http.StatusConflict, "resize job %s: replicas join it at step %d; it changes again once they have", id, j.joinStep())
	}
	current := map[int]bool{}
	for _, t := range stageRuns(j) {
		current[t.task.Replica] = true
	}
	for _, r := range req.Replicas {
		if !current[r] {
			return nil, badRequest("resize: replica %d is not one of job %s's (a replica is added by node: add)", r, id)
		}
	}
	if len(req.Replicas) != len(current) && len(req.Add) == 0 && syncsByAllreduce(j) {
		return nil, httpErrorf(http.StatusConflict, "resize job %s: %s", id, allreduceMembersFixed)
	}
	return j, nil
}
