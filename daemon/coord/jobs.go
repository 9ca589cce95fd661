package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// job is a submitted job and everything the coordinator knows of it.
type job struct {
	id     string
	seq    uint64 // queue order; a restart keeps its original's
	source string // the job file's text
	file   *config.Job
	model  *config.Model
	// modelText is the model file's text, sent in every task.
	modelText string
	state     api.JobState
	reason    string
	plan      *sched.Plan
	planJSON  json.RawMessage
	gen       int64
	pace      stepPace // how fast its stage advances (grow.go)
	growWaits int      // checkpoints a move back up has waited for a grow (raise.go)
	// growRetries counts the grow-only evaluations whose grow was refused
	// for now, retryGrow asks for the next one without a change of the
	// cluster (raise.go).
	growRetries int
	retryGrow   bool
	tasks       []*taskRun         // stage replicas in stage order, then PS shards
	hourly      float64            // price of everything placed, per hour
	stopPlan    context.CancelFunc // ends the scheduler's run while planning
	ckpt        jobCheckpoints
	asked       *api.CheckpointAsked // a checkpoint asked for while it runs (asked.go), until one is complete
	// restarts counts the automatic restarts before this job; restartOf
	// is the job it restarts, restartedAs the one that restarted it.
	restarts    int
	restartOf   string
	restartedAs string
	// failedAt is when a restarting job failed (zero once restarted),
	// notBefore when it may be restarted at the earliest, suspects the
	// nodes its restarts avoid.
	failedAt  time.Time
	notBefore time.Time
	suspects  []store.Suspect
	// lost names the nodes whose death failed the job (for suspects).
	lost []lostNode
	// raiseChecked is the newest checkpoint a move back up to the
	// throughput_limit was evaluated at (raise.go).
	raiseChecked int64
	// raiseChanges is Coordinator.changes when a move back up was last
	// evaluated, raisedAt when.
	raiseChanges uint64
	raisedAt     time.Time
	// drainChecked is the newest checkpoint a move off a draining node
	// was evaluated at (drain.go).
	drainChecked int64
	// moving is set while a restarting job restarts to move, not to
	// recover: the restart spends none of checkpoint.restarts.
	moving bool

	balance *jobBalance
	// heldBatching is the batching counts of a running job taken up from
	// the state database, until its balance is set up again once its
	// tasks are adopted (restoreBalance).
	heldBatching *store.Batching
	// heldProgress is the loss history and step times the record of a job
	// taken up from the state database kept, until the job's allocator
	// record is set up again (recordProgress).
	heldProgress *store.Progress
	carry        *batchCarry  // batches a restart hands on (batchrestart.go)
	resizeTo     *batchCarry  // set while restarting to resize its batches
	alloc        *jobAlloc    // the allocator's record (alloc_job.go); nil: not tracked
	replan       *replanState // re-planning from measured throughput (replan.go); nil: not yet running or not enabled
	idemKey      string
	verified     bool   // its restore checkpoint was verified in full
	possible     int    // 1: the catalog could host it, so it may wait; -1: it never can; 0: unknown yet
	triedAt      uint64 // Coordinator.changes when its placement last failed
	adoptBy      time.Time
	submitted    time.Time
	started      time.Time
	finished     time.Time
}

// taskRun is a task, the node it is placed on and the node's last report
// of it. node is nil while the task waits to be adopted: the coordinator
// restarted and its node has not registered again yet.
type taskRun struct {
	job      *job
	task     api.Task
	nodeName string
	node     *node
	report   api.TaskReport
	// loadedOn is, for a task loaded from the state database, the
	// registration it was bound to when recorded (registration).
	loadedOn string
}

// registration is the id of the node registration t is bound to: its
// node's, or while a loaded task waits to be adopted, the one recorded.
func (t *taskRun) registration() string {
	if t.node != nil {
		return t.node.id
	}
	return t.loadedOn
}

// waiting reports whether j waits to be placed.
func (j *job) waiting() bool { return j.state == api.JobPending || j.state == api.JobQueued }

// jobFileName names a job file in errors where its submitter did not
// (api.JobFileParam), and a stored job's when it is read back.
const jobFileName = "job.toml"

// submit parses and checks a job file, named file in its errors, records
// the job durably and queues it; key, if set, is the request's idempotency
// key: a submission that repeats a key gets the job the first one created
// (created is false).
func (c *Coordinator) submit(src []byte, file, key string) (j *job, created bool, err error) {
	if old, ok := c.jobByKey(key); ok {
		return old, false, nil
	}
	jf, err := config.ParseJob(file, src)
	if err != nil {
		return nil, false, badRequest("%v", err)
	}
	j = &job{source: string(src), file: jf, state: api.JobPending, submitted: time.Now(), idemKey: key}
	if err := c.check(j); err != nil {
		return nil, false, badRequest("%v", err)
	}
	c.mu.Lock()
	if id, ok := c.idem[key]; key != "" && ok { // a concurrent twin won
		old := c.job(id)
		c.mu.Unlock()
		return old, false, nil
	}
	if err := c.checkMemory(j); err != nil {
		c.mu.Unlock()
		return nil, false, badRequest("%v", err)
	}
	if err := c.enqueue(j); err != nil {
		c.mu.Unlock()
		return nil, false, err
	}
	if key != "" {
		c.idem[key] = j.id
	}
	saved := c.save(j)
	c.mu.Unlock()
	if err := saved(); err != nil {
		c.mu.Lock()
		// A retry of the request tries again, rather than getting this job:
		// here, and after a restart from the record the store's own retry
		// lands once the disk is freed.
		if key != "" && c.idem[key] == j.id {
			delete(c.idem, key)
		}
		j.idemKey = ""
		c.finish(j, api.JobFailed, fmt.Sprintf("not recorded in the state database: %v", err), time.Now())
		c.mu.Unlock()
		return nil, false, httpErrorf(http.StatusServiceUnavailable, "recording the job: %v", err)
	}
	return j, true, nil
}

func (c *Coordinator) jobByKey(key string) (*job, bool) {
	if key == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.idem[key]
	if !ok {
		return nil, false
	}
	j := c.job(id)
	return j, j != nil
}

// enqueue gives a checked job its id and queues it. c.mu is held.
func (c *Coordinator) enqueue(j *job) error {
	waiting := 0
	for _, o := range c.jobs {
		if o.waiting() || o.state == api.JobPlanning {
			waiting++
		}
	}
	if waiting >= c.cfg.QueueLength {
		return httpErrorf(http.StatusServiceUnavailable, "%d jobs are waiting to be placed; try later", waiting)
	}
	c.lastJob++
	j.id = fmt.Sprintf("j%d", c.lastJob)
	if j.seq == 0 {
		j.seq = c.lastJob
	}
	c.jobs = append(c.jobs, j)
	jf := j.file
	c.log.Info("job submitted", "job", j.id, "name", jf.Name, "model", jf.Model, "method", jf.Method, "restart_of", j.restartOf)
	c.wake()
	return nil
}

// check resolves what the job file names against what the coordinator
// knows: the model, the data spec's kind, the method and the PS type, and
// reads the manifest of the checkpoint it restores (hashing that
// checkpoint's files is the planner's, after the submission is answered).
// Its errors point at the job file's lines.
func (c *Coordinator) check(j *job) error {
	jf := j.file
	m, err := config.LoadModel(jf.Model)
	if err != nil {
		return jf.Errorf("model", "%v", err)
	}
	if _, err := data.ParseSpec(jf.Data); err != nil {
		return jf.Errorf("data", "%v", err)
	}
	if !slices.Contains(sched.Methods(), jf.Method) {
		return jf.Errorf("method", "unknown method %q (want one of %s)", jf.Method, strings.Join(sched.Methods(), ", "))
	}
	if jf.PSType != "" {
		if _, ok := c.cfg.Catalog.Type(jf.PSType); !ok {
			return jf.Errorf("ps_type", "type %q is not in the catalog (have %s)", jf.PSType, c.typeNames())
		}
	}
	if err := checkDistributable(jf, m); err != nil {
		return err
	}
	if err := checkData(jf, m); err != nil {
		return err
	}
	if err := checkCheckpointDir(jf); err != nil {
		return err
	}
	text, err := jf.ModelFile(m)
	if err != nil {
		return err
	}
	if jf.Profile != "" {
		if m.HasTowers() {
			return jf.Errorf("profile", "model %s has towers and is planned as one merged layer: a per-layer profile does not apply", m.Name)
		}
		if _, _, err := loadProfile(jf, len(m.Shapes())); err != nil {
			return jf.Errorf("profile", "%v", err)
		}
	}
	j.model, j.modelText = m, string(text)
	return c.checkRestore(j)
}

// checkData checks the job's data can feed its model (nn.CheckData) when
// the coordinator can open the data: a generator, or a file it sees too (a
// file only the nodes see is checked when stage 0 starts).
func checkData(jf *config.Job, m *config.Model) error {
	src, err := data.Open(jf.Data, data.Options{Vocab: m.Input.Vocab, Split: data.SplitTrain})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return jf.Errorf("data", "%v", err)
	}
	defer src.Close()
	if err := nn.CheckData(m, src.Schema()); err != nil {
		return jf.Errorf("data", "%v", err)
	}
	return nil
}

// checkCheckpointDir refuses a checkpoint.dir that the coordinator sees
// as something other than a directory (a file, a device, a FIFO): the
// parameter servers would fail every checkpoint, the last one included,
// after the whole run. A directory that does not exist here is the nodes'
// to create.
func checkCheckpointDir(jf *config.Job) error {
	dir := jf.Checkpoint.Dir
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return jf.Errorf("checkpoint.dir", "%v", err)
	case !fi.IsDir():
		return jf.Errorf("checkpoint.dir", "%s is not a directory (mode %v)", dir, fi.Mode())
	}
	return nil
}

// checkDistributable refuses what distributed training does not do yet,
// at submission rather than when the first task starts: clip_norm, a
// global gradient norm across stages and parameter-server shards.
func checkDistributable(jf *config.Job, m *config.Model) error {
	if jf.Optimizer != nil {
		if jf.Optimizer.ClipNorm > 0 {
			return jf.Errorf("optimizer.clip_norm", "not supported in distributed training yet (a global gradient norm across stages and parameter-server shards); remove it")
		}
		return nil
	}
	if m.Optimizer.ClipNorm > 0 {
		return jf.Errorf("model", "model %s sets optimizer.clip_norm = %g, which distributed training does not support yet; override [optimizer] in the job file without it", m.Name, m.Optimizer.ClipNorm)
	}
	return nil
}

// JobProblem builds the scheduling problem of a job file's model on the
// catalog, as `heterps plan --model --catalog` does: layer times are
// roofline estimates from the catalog's device descriptors, or, when the
// job file names a profile, that file's measured times (profile.go). The
// coordinator also plans on its stored profiles (jobProblem).
func JobProblem(jf *config.Job, m *config.Model, cat *config.Catalog) (*sched.Problem, error) {
	p, _, err := jobProblem(jf, m, cat, nil)
	return p, err
}

// jobProblem is JobProblem that, when the job file names no profile, also
// plans each type with a usable stored profile of the model in stored on
// that profile's columns (profiles.go), and says where each type's layer
// times came from.
func jobProblem(jf *config.Job, m *config.Model, cat *config.Catalog, stored profileSet) (*sched.Problem, problemSources, error) {
	var src problemSources
	spec := sched.DefaultEstimateSpec()
	spec.Batch = jf.Batch
	spec.Epochs, spec.Samples = 1, jf.TotalSteps()*int64(jf.Batch)
	if jf.Epochs > 0 {
		spec.Epochs, spec.Samples = jf.Epochs, jf.Samples
	}
	spec.Limit = jf.ThroughputLimit
	spec.PSType, spec.PSRatio = jf.PSType, jf.PSRatio
	spec.Whole = m.HasTowers()
	if spec.PSType == "" {
		spec.PSType = firstCPUType(cat)
	}
	var prof *config.Problem
	var estimated []string
	if jf.Profile != "" && !spec.Whole {
		var err error
		if prof, estimated, err = loadProfile(jf, len(m.Shapes())); err != nil {
			return nil, src, err
		}
		spec.ProfileBatch = prof.ProfileBatch
	}
	pc, err := sched.EstimateProblem(m.Shapes(), cat, spec)
	if err != nil {
		return nil, src, err
	}
	var measured []string
	switch {
	case prof != nil:
		if err := applyProfile(pc, prof, jf.Profile); err != nil {
			return nil, src, err
		}
		for _, t := range pc.Types {
			if !slices.Contains(estimated, t.Name) {
				measured = append(measured, t.Name)
			}
		}
	case spec.Whole:
		if len(stored) > 0 {
			src.skipped = append(src.skipped, fmt.Sprintf("model %s has towers and is planned as one merged layer: its stored per-layer profiles do not apply", m.Name))
		}
	default:
		measured, src.skipped = applyStored(pc, m, stored)
	}
	if (prof != nil || len(measured) > 0) && jf.ThroughputLimit == 0 { // the floor derived from the roofline would not fit the measured times
		if pc.ThroughputLimit, err = sched.AutoLimit(pc); err != nil {
			return nil, src, err
		}
	}
	src.types = sourcesOf(pc, measured)
	src.denseSync = sched.MeasuredDenseSync(pc, src.types)
	p, err := sched.NewProblem(pc)
	return p, src, err
}

func firstCPUType(cat *config.Catalog) string {
	for _, t := range cat.Types {
		if t.Kind == config.KindCPU {
			return t.Name
		}
	}
	return ""
}

// start turns a placement into tasks and sets the job running. c.mu is held.
func (c *Coordinator) start(j *job, pl *placement, now time.Time) {
	j.state, j.started, j.reason = api.JobRunning, now, ""
	j.gen++
	j.balance = newBalance(j, pl, j.carry)
	j.tasks, j.hourly = nil, 0
	jf := j.file
	base := api.Task{JobID: j.id, Model: j.modelText, Data: jf.Data, Steps: jf.TotalSteps(), Seed: jf.Seed, Mode: jf.Mode, MicroBatches: jf.MicroBatches, Schedule: jf.Schedule,
		Lookahead:  jf.PipelineLookahead(),
		SecretFile: c.cfg.SecretFile, Plain: c.plainDataPlane(),
		CheckpointDir: jf.Checkpoint.Dir, CheckpointEvery: jf.Checkpoint.Every, FirstStep: j.firstStep(), Generation: j.gen}
	if j.ckpt.restored != nil {
		base.RestoreDir = j.ckpt.restored.Dir
	}
	for _, n := range pl.ps {
		base.PS = append(base.PS, n.psAddr())
	}
	addrs := make([][]string, len(pl.stages))
	for i, reps := range pl.stages {
		for _, r := range reps {
			addrs[i] = append(addrs[i], r.node.req.DataAddr)
		}
	}
	for i, reps := range pl.stages {
		s := j.plan.Stages[i]
		base.Layout = append(base.Layout, api.StageLayout{FirstLayer: s.First, LastLayer: s.Last, Replicas: len(reps),
			DenseSync: denseSync(jf, j.model, s.First, s.Last, len(reps), j.plan.DenseSync[s.Type])})
	}
	base.CheckpointGrid = checkpointGrid(jf, j.model, j.plan, base.Layout, c.cfg.AskGrid)
	for i, reps := range pl.stages {
		s := j.plan.Stages[i]
		for k, r := range reps {
			t := base
			if base.Layout[i].DenseSync == api.DenseSyncAllreduce {
				t.Ring, t.RingRelieve = addrs[i], hostingPS(reps, pl.ps)
			}
			t.TaskID, t.Role = fmt.Sprintf("%s.s%d.r%d", j.id, i, k), api.RoleStage
			t.Stage, t.Replica, t.Replicas, t.Units = i, k, len(reps), r.units
			t.FirstLayer, t.LastLayer = s.First, s.Last
			t.DataShard, t.DataShards, t.Batch = k, len(reps), r.batch
			laneTaskBatches(&t, pl, j.balance)
			if i > 0 {
				t.Prev = addrs[i-1]
			}
			if i+1 < len(addrs) {
				t.Next = addrs[i+1]
			}
			j.tasks = append(j.tasks, &taskRun{job: j, task: t, node: r.node, nodeName: r.node.req.Name})
			j.hourly += c.price(s.Type) * float64(r.units)
		}
	}
	for k, n := range pl.ps {
		t := base
		t.TaskID, t.Role, t.Shard = fmt.Sprintf("%s.ps%d", j.id, k), api.RolePS, k
		j.tasks = append(j.tasks, &taskRun{job: j, task: t, node: n, nodeName: n.req.Name})
		j.hourly += c.price(j.plan.PSType)
	}
	if j.asked != nil { // asked before a restart: ask the new tasks
		c.askAgain(j)
	}
	c.allocStart(j, now)
	c.log.Info("job running", "job", j.id, "stages", len(pl.stages), "ps_shards", len(pl.ps), "tasks", len(j.tasks))
	c.save(j)
}

// hostingPS lists the replicas (places in reps) whose node also hosts one
// of the job's parameter-server shards.
func hostingPS(reps []replica, ps []*node) []int {
	var out []int
	for k, r := range reps {
		if slices.Contains(ps, r.node) {
			out = append(out, k)
		}
	}
	return out
}

func (c *Coordinator) price(typ string) float64 {
	t, _ := c.cfg.Catalog.Type(typ)
	return t.Price
}

// finish puts j in a final state, records it and prunes old jobs. c.mu is
// held.
func (c *Coordinator) finish(j *job, state api.JobState, reason string, now time.Time) {
	j.state, j.reason, j.finished, j.asked = state, reason, now, nil
	c.log.Info("job "+string(state), "job", j.id, "reason", reason)
	c.save(j)
	c.wake()
	c.prune(now)
}

// cancel cancels a job that has not finished.
func (c *Coordinator) cancel(id string) (api.JobStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, err := c.knownJob(id)
	switch {
	case err != nil:
		return api.JobStatus{}, err
	case j.state.Final():
		return api.JobStatus{}, httpErrorf(http.StatusConflict, "job %s is already %s", id, j.state)
	}
	if j.stopPlan != nil {
		j.stopPlan()
	}
	c.finish(j, api.JobCancelled, "cancelled by the user", time.Now())
	return c.status(j, time.Now()), nil
}

// knownJob is job id, or a 404 error naming it. c.mu is held.
func (c *Coordinator) knownJob(id string) (*job, error) {
	if j := c.job(id); j != nil {
		return j, nil
	}
	return nil, httpErrorf(http.StatusNotFound, "no job %q", id)
}

func (c *Coordinator) job(id string) *job {
	for _, j := range c.jobs {
		if j.id == id {
			return j
		}
	}
	return nil
}

// applyReport records a node's report on one of its tasks; reports on tasks
// the node does not hold (any more) are ignored. c.mu is held.
func (c *Coordinator) applyReport(n *node, r api.TaskReport, now time.Time) {
	t := c.taskOn(n, r.TaskID)
	if t == nil {
		return
	}
	c.noteCheckpointFailure(t, n, r)
	noteCheckpointWriting(t, r, now)
	t.report = r
	j := t.job
	c.recordProgress(t, r, now)
	if t.task.Role == api.RoleStage && r.State == api.TaskRunning {
		j.pace.observe(r.Step, now)
	}
	if r.State == api.TaskFailed && j.joins(t) && c.callOffGrow(j, "a joining replica failed: "+r.Error, n, now) {
		return
	}
	if lateForGrow(j, r) {
		c.callOffGrow(j, fmt.Sprintf("task %s on node %s took it too late", t.task.TaskID, n.req.Name), nil, now)
	}
	if r.State == api.TaskFailed {
		c.taskFailed(j, n, r, now)
		return
	}
	c.recordCheckpoints(t, r.Checkpoints)
	c.maybeDone(j, now)
}

// maybeDone finishes a running job whose stage tasks are all done, once
// its last checkpoint is in (or waited for too long: reap). c.mu is held.
func (c *Coordinator) maybeDone(j *job, now time.Time) {
	if j.state != api.JobRunning {
		return
	}
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage && t.report.State != api.TaskDone {
			return
		}
	}
	if j.awaitsFinalCheckpoint() {
		if j.ckpt.trained.IsZero() {
			j.ckpt.trained = now
		}
		return
	}
	reason := ""
	if runsBelowLimit(j) {
		reason = j.reason
	}
	c.finish(j, api.JobDone, reason, now)
}

// taskOn finds a task of a running job on n. c.mu is held.
func (c *Coordinator) taskOn(n *node, id string) *taskRun {
	for _, j := range c.jobs {
		if j.state != api.JobRunning {
			continue
		}
		for _, t := range j.tasks {
			if t.task.TaskID == id && t.node == n {
				return t
			}
		}
	}
	return nil
}

// tasksOf lists the tasks of running jobs placed on n. c.mu is held.
func (c *Coordinator) tasksOf(n *node) []api.Task {
	tasks := []api.Task{}
	if !n.alive() {
		return tasks
	}
	for _, j := range c.jobs {
		if j.state != api.JobRunning {
			continue
		}
		for _, t := range j.tasks {
			if t.node == n {
				tasks = append(tasks, t.task)
			}
		}
	}
	return tasks
}

// psShards is the number of the job's parameter-server shards.
func (j *job) psShards() int {
	n := 0
	for _, t := range j.tasks {
		if t.task.Role == api.RolePS {
			n++
		}
	}
	return n
}

// status is j as the API shows it, its progress folded from the task
// reports. c.mu is held.
func (c *Coordinator) status(j *job, now time.Time) api.JobStatus {
	s := api.JobStatus{ID: j.id, Name: j.file.Name, State: j.state, Reason: j.reason, Plan: j.planJSON,
		Steps: j.file.TotalSteps(), Stages: []api.StageStatus{}, PS: []string{}, Submitted: j.submitted, Generation: j.gen}
	if !j.started.IsZero() {
		started := j.started
		s.Started = &started
		end := now
		if !j.finished.IsZero() {
			end = j.finished
		}
		s.CostSoFar = j.hourly * end.Sub(j.started).Hours()
	}
	if !j.finished.IsZero() {
		finished := j.finished
		s.Finished = &finished
	}
	s.RestoredFrom, s.Checkpoint, s.CheckpointAsked = j.ckpt.restored, j.ckpt.latest, j.askedStatus()
	s.CheckpointFailure, s.CheckpointFailures = j.unresolvedFailure(), j.ckpt.failures
	s.CheckpointWriting, s.Loading = j.checkpointWriting(), j.loading()
	if by, _, waits := c.finalCheckpointWait(j); waits {
		s.FinalCheckpointBy = &by
	}
	s.Restarts, s.RestartOf, s.RestartedAs = j.restarts, j.restartOf, j.restartedAs
	if !j.state.Final() {
		s.Avoids = j.avoids(now)
	}
	s.Batching = j.balance.status()
	s.Alloc = c.jobAllocStatus(j)
	s.Replan = replanStatus(j, s.CostSoFar)
	if j.state == api.JobRunning && j.joining() {
		s.JoiningAt = j.joinStep()
	}
	if j.waiting() {
		s.QueuePosition = c.queuePosition(j)
	}
	if len(j.tasks) == 0 || j.plan == nil {
		return s
	}
	for _, t := range j.tasks {
		if t.task.Role == api.RolePS {
			s.PS = append(s.PS, t.nodeName)
		}
	}
	c.fold(j, &s)
	return s
}

// stageRate is the throughput of a stage whose replicas have all ended:
// every replica's samples over the longest replica's window. Replicas in
// step (BSP) share their window, and this is the sum of their rates; ones
// that run apart (ASP) end apart, and summing each one's rate over its own
// window would count the faster one's pace after it stopped. A replica
// that reports no window (an older daemon) keeps the sum.
func stageRate(reports []api.TaskReport) float64 {
	var samples, window float64
	for _, r := range reports {
		if r.TimedSeconds <= 0 {
			return sumRates(reports)
		}
		samples += r.SamplesPerS * r.TimedSeconds
		window = max(window, r.TimedSeconds)
	}
	return samples / window
}

func sumRates(reports []api.TaskReport) float64 {
	sum := 0.0
	for _, r := range reports {
		sum += r.SamplesPerS
	}
	return sum
}

// fold aggregates the task reports: the job's step is the fewest steps any
// stage replica completed, its throughput the slowest stage's (a stage's
// being the sum of its replicas', or, once they have all ended, stageRate),
// its loss the mean over the last stage's replicas that reported.
func (c *Coordinator) fold(j *job, s *api.JobStatus) {
	s.Step = s.Steps
	var loss, weights float64
	last := len(j.plan.Stages) - 1
	for i, ps := range j.plan.Stages {
		st := api.StageStatus{Stage: i, Type: ps.Type, Units: ps.Units, FirstLayer: ps.First, LastLayer: ps.Last,
			PredictedThroughput: ps.Throughput, Nodes: []string{}, Replicas: []int{}, Batches: []int{}, StepSeconds: []float64{}}
		var ended []api.TaskReport
		for _, t := range j.tasks {
			if t.task.Role != api.RoleStage || t.task.Stage != i {
				continue
			}
			if t.report.Step >= s.Steps {
				ended = append(ended, t.report)
			}
			st.Nodes, st.Replicas = append(st.Nodes, t.nodeName), append(st.Replicas, t.task.Replica)
			if i < len(t.task.Layout) {
				st.DenseSync = t.task.Layout[i].DenseSync
			}
			st.Batches = append(st.Batches, t.task.Batch)
			st.StepSeconds = append(st.StepSeconds, t.report.StepSeconds)
			st.MeasuredThroughput += t.report.SamplesPerS
			s.Step = min(s.Step, max(t.report.Step, j.firstStep()))
			if i == last && t.report.TaskID != "" {
				w := float64(max(t.report.Batch, 1)) // replicas of unequal batches count per sample
				loss += w * t.report.Loss
				weights += w
			}
		}
		if len(ended) > 0 && len(ended) == len(st.Replicas) {
			st.MeasuredThroughput = stageRate(ended)
		}
		if i == 0 || st.MeasuredThroughput < s.SamplesPerS {
			s.SamplesPerS = st.MeasuredThroughput
		}
		s.Stages = append(s.Stages, st)
	}
	if weights > 0 {
		s.Loss = loss / weights
	}
}
