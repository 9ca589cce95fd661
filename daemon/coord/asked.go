package coord

import (
	"math"
	"net/http"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/sched"
)

// Checkpoints asked for while a job runs (POST /v1/jobs/{id}/checkpoint),
// e.g. by `heterps launch` when a batch scheduler warns of the end of its
// allocation. The coordinator picks a step ahead of the furthest stage
// replica (askMargin: two heartbeats at the stage's pace) and sets it on
// the job's PS tasks
// (api.Task.CheckpointAt), which take it as they take the periodic ones.
// A job with allreduce stages can be checkpointed only at steps where the
// stages hand their dense parameters to the servers: the periodic ones,
// the last, and the multiples of the job's checkpoint grid, which start
// sets to about Config.AskGrid of training. A step that training
// passed before the servers heard of it is asked again, later, up to
// maxAskTries times. The ask is not kept in the state database: a
// restarted coordinator has forgotten it, and says so by its absence.

// maxAskTries bounds the steps one ask is tried at.
const maxAskTries = 5

// mirrorShare bounds the share of a link the mirror's assignments at the
// checkpoint grid's steps may take (at mirrorLinkBytesPerS), which spaces
// the grid further than Config.AskGrid for large dense parameters.
const (
	mirrorShare         = 0.02
	mirrorLinkBytesPerS = 1e9
)

// askCheckpoint asks for a checkpoint of job id at the next step its
// parameter servers can take one at, or reports the ask already open.
func (c *Coordinator) askCheckpoint(id string, now time.Time) (api.JobStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, err := c.knownJob(id)
	switch {
	case err != nil:
		return api.JobStatus{}, err
	case j.file.Checkpoint.Dir == "":
		return api.JobStatus{}, httpErrorf(http.StatusConflict, "job %s has no checkpoint.dir to write a checkpoint into (set one in its job file)", id)
	case j.state != api.JobRunning:
		return api.JobStatus{}, httpErrorf(http.StatusConflict, "job %s is %s: only a running job can be checkpointed", id, j.state)
	}
	if furthest := furthestStep(j); furthest >= j.file.TotalSteps() {
		return api.JobStatus{}, httpErrorf(http.StatusConflict, "job %s has trained all its %d steps", id, furthest)
	}
	if j.asked == nil {
		j.asked = &api.CheckpointAsked{At: now}
		c.askAgain(j)
	}
	return c.status(j, now), nil
}

// askAgain sets j's open ask on its PS tasks at the next step they can
// take it at, after any step asked before (a PS node takes only a later
// one). c.mu is held.
func (c *Coordinator) askAgain(j *job) {
	step := max(furthestStep(j)+1+c.askMargin(j), j.asked.Step+1)
	step = mirrorStepFrom(j, min(step, j.file.TotalSteps()))
	j.asked.Step, j.asked.Tries = step, j.asked.Tries+1
	for _, t := range j.tasks {
		if t.task.Role == api.RolePS {
			t.task.CheckpointAt = step
		}
	}
	c.log.Info("checkpoint asked for", "job", j.id, "step", step, "try", j.asked.Tries)
}

// askHeartbeats is how many heartbeat intervals of training an asked step
// lies ahead of the furthest replica: a PS node hears of the ask in its
// next heartbeat's reply, one interval at most, and a step passed meanwhile
// is asked again.
const askHeartbeats = 2

// askMargin is the steps an asked checkpoint lies ahead of the furthest
// replica: askHeartbeats intervals at the stage's step rate, at least
// minAskSteps. c.mu is held.
func (c *Coordinator) askMargin(j *job) int64 {
	steps := c.stepRate(j) * askHeartbeats * c.cfg.HeartbeatInterval.Seconds()
	return max(minAskSteps, int64(math.Ceil(steps)))
}

// minAskSteps is the least margin of an asked step.
const minAskSteps = 2

// furthestStep is the furthest step j's stage replicas report, or the
// step it starts from.
func furthestStep(j *job) int64 {
	furthest := j.firstStep()
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage {
			furthest = max(furthest, t.report.Step)
		}
	}
	return furthest
}

// mirrorStepFrom is the first step from step on that j's parameter servers
// hold all of: any step, unless a stage keeps its dense parameters by
// allreduce; then the next it hands them over at
// (pipeline.Allreduce.NextMirrorStep, with the interval and grid its tasks
// were given).
func mirrorStepFrom(j *job, step int64) int64 {
	if len(j.tasks) == 0 || !syncsByAllreduce(j) {
		return step
	}
	t := j.tasks[0].task
	ar := pipeline.Allreduce{TotalSteps: t.Steps, CheckpointEvery: t.CheckpointEvery, CheckpointGrid: t.CheckpointGrid}
	return ar.NextMirrorStep(step)
}

// askedCheckpointDone closes j's ask once a checkpoint of its step or a
// later one is complete. c.mu is held.
func (j *job) askedCheckpointDone() {
	if j.asked != nil && j.ckpt.latest != nil && j.ckpt.latest.Step >= j.asked.Step && j.asked.Step > 0 {
		j.asked = nil
	}
}

// askedCheckpointFailed asks again after the servers could not take j's
// asked checkpoint at step, or gives up after maxAskTries. c.mu is held.
func (c *Coordinator) askedCheckpointFailed(j *job, step int64) {
	if j.asked == nil || j.asked.Step != step || j.state != api.JobRunning {
		return
	}
	if j.asked.Tries >= maxAskTries || step >= j.file.TotalSteps() || furthestStep(j) >= j.file.TotalSteps() {
		c.log.Warn("checkpoint asked for could not be taken; giving up", "job", j.id, "step", step, "tries", j.asked.Tries)
		j.asked = nil
		return
	}
	c.askAgain(j)
}

// checkpointGrid is the spacing of the further steps at which the
// allreduce stages of a job that writes checkpoints hand their dense
// parameters to the servers, so that a checkpoint asked for can be taken
// there: about grid of training at the plan's throughput,
// or longer where the assignments (values and optimiser state) would take
// more than mirrorShare of a link. 0 for a job without a checkpoint.dir or
// without allreduce stages.
func checkpointGrid(jf *config.Job, m *config.Model, plan *sched.Plan, layout []api.StageLayout, grid time.Duration) int64 {
	if jf.Checkpoint.Dir == "" || plan == nil || plan.Throughput <= 0 || jf.Batch <= 0 {
		return 0
	}
	var bytes int64
	for _, s := range layout {
		if s.DenseSync == api.DenseSyncAllreduce {
			bytes += denseBytes(m, s.FirstLayer, s.LastLayer)
		}
	}
	if bytes == 0 {
		return 0
	}
	const stateCopies = 3 // values and Adam's two moments
	seconds := max(grid.Seconds(), float64(stateCopies*bytes)/mirrorLinkBytesPerS/mirrorShare)
	steps := math.Ceil(seconds * plan.Throughput / float64(jf.Batch))
	return int64(min(max(steps, 1), float64(jf.TotalSteps())))
}

// askedStatus is j's open ask as the API shows it. c.mu is held.
func (j *job) askedStatus() *api.CheckpointAsked {
	if j.asked == nil {
		return nil
	}
	a := *j.asked
	return &a
}
