package config

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Job is a job file: what to train (a model and its data), how much
// (steps, or epochs of a given number of samples), and how the scheduler
// should run it (throughput floor, method, BSP or ASP, checkpoints).
//
//	version = 1
//	name = "ctr"
//	model = "ctrdnn"           # zoo name or path of a model file
//	data = "synthetic:1"       # data spec, as `heterps train --data`
//	batch = 512
//	steps = 200                # or: epochs = 2 with samples = 100000
//	throughput_limit = 0       # samples/s; 0 lets the scheduler pick
//	method = "exact"           # a scheduling method of `heterps plan`
//	mode = "bsp"               # or "asp"
//	micro_batches = 4          # per step, so that stages overlap; default 1
//	schedule = "1f1b"          # or "fill-drain": order of a pipeline stage's forwards and backwards
//	dense_sync = "ps"          # ps | allreduce | auto (default: auto with checkpoint.restarts, else ps)
//	seed = 1
//	priority = 2               # optional: weight under --alloc-policy priority; default 1
//	target_loss_reduction = 0.9  # optional: stop once the normalised loss reduction reaches it
//	trace = "/tmp/j.jsonl"     # optional: the coordinator writes the job's loss history here
//	profile = "ctrdnn.toml"    # optional: plan on this problem file of `heterps profile` instead of the catalog's roofline
//	[optimizer]                # optional: replaces the model's optimizer
//	kind = "adam"
//	lr = 0.001
//	[checkpoint]
//	dir = "/var/lib/heterps/ctr"
//	every = 100                # steps
//	restore = "/var/lib/heterps/ctr"  # optional: start from its latest
//	                           # complete checkpoint (or this step directory)
//	restarts = 3               # optional: after a failure while running,
//	                           # restart from the latest checkpoint
//	keep = 5                   # newest complete checkpoints kept; 0 = all (default 5)
//	[batching]                 # per-replica batch sizes of data-parallel stages
//	mode = "dynamic"           # uniform | variable | dynamic; default "auto"
//	interval = 3               # dynamic: step-time reports (one a heartbeat) between adjustments
//	smoothing = 0.5            # dynamic: EMA weight of the past step times, in [0, 1)
//	deadband = 0.05            # dynamic: relative imbalance left alone
//	min_batch = 1              # no replica's batch below this
//	resize = "in-place"        # or "restart": from the newest checkpoint (needs checkpoint.every)
//
//	[replan]                   # re-plan from measured throughput (needs checkpoint.every)
//	enabled = true
//	gain = 0.05                # move when the rest of the run gets this much cheaper, move paid
//	warmup = 20                # steps after each start before throughput counts
//	smoothing = 0.5            # EMA weight of a new measurement, in (0, 1]
//	move_seconds = 30          # a move's start-up time until one was measured
type Job struct {
	Version         int        `toml:"version"`
	Name            string     `toml:"name"`
	Model           string     `toml:"model"`
	Data            string     `toml:"data"`
	Batch           int        `toml:"batch"`
	Steps           int64      `toml:"steps"`
	Epochs          float64    `toml:"epochs"`
	Samples         int64      `toml:"samples"` // samples per epoch, with epochs
	Optimizer       *Optimizer `toml:"optimizer"`
	ThroughputLimit float64    `toml:"throughput_limit"`
	Method          string     `toml:"method"`
	Mode            string     `toml:"mode"`
	MicroBatches    int        `toml:"micro_batches"` // per step; 0 = 1
	Schedule        string     `toml:"schedule"`      // ScheduleOneFOneB (default) or ScheduleFillDrain
	// Lookahead is how many forwards beyond strict 1F1B's warm-up a stage
	// runs ahead of its backwards (1F1B only; DefaultLookahead when not
	// set): each holds one micro-batch's activations more and hides one
	// more hop of the gradient's way back.
	Lookahead *int   `toml:"lookahead"`
	DenseSync string `toml:"dense_sync"` // DenseSyncAuto, DenseSyncAllreduce or DenseSyncPS
	// DenseSyncDefaulted says the file named no dense_sync: applyDefaults
	// chose DenseSync, which a stage of one replica need not follow.
	DenseSyncDefaulted bool          `toml:"-"`
	Seed               uint64        `toml:"seed"`
	PSType             string        `toml:"ps_type"`  // type whose price pays PS cores; "" = the catalog's first CPU type
	PSRatio            float64       `toml:"ps_ratio"` // ps_cores = ceil(ps_ratio * units); 0 = one shard
	Checkpoint         JobCheckpoint `toml:"checkpoint"`
	Batching           JobBatching   `toml:"batching"`
	Replan             JobReplan     `toml:"replan"` // re-planning from measured throughput (job_replan.go)
	// Priority weighs the job's gains under the coordinator's priority
	// allocation policy (default 1); TargetLossReduction, when set, stops
	// the job once its normalised loss reduction reaches it; Trace, when
	// set, is a file the coordinator writes the job's (time, step, loss,
	// units, step seconds) history to as JSON lines (alloc_job.go).
	Priority            float64 `toml:"priority"`
	TargetLossReduction float64 `toml:"target_loss_reduction"`
	Trace               string  `toml:"trace"`
	// Profile, when set, is a problem file written by `heterps profile`
	// for the job's model: the coordinator plans on its measured layer
	// times (per type, by name) instead of the catalog's roofline
	// estimates. It must be readable by the coordinator.
	Profile string `toml:"profile"`

	loc *Locator
}

// JobBatching says how a data-parallel stage splits the batch over its
// replicas: in proportion to their units (uniform), to their expected
// throughput before the first step (variable), or to their measured
// throughput, adjusted while the job runs (dynamic). Auto is dynamic for a
// stage whose replicas differ (in units or CPU share), uniform otherwise.
type JobBatching struct {
	Mode      string  `toml:"mode"`
	Interval  int64   `toml:"interval"`
	Smoothing float64 `toml:"smoothing"`
	Deadband  float64 `toml:"deadband"`
	MinBatch  int     `toml:"min_batch"`
	// Resize is how a new split reaches the replicas: "in-place" at a step
	// boundary, or "restart": the job restarts from its newest checkpoint
	// with the new split (the Dynamic Batching paper's kill-restart; needs
	// checkpoint.every, and BSP).
	Resize string `toml:"resize"`
}

// Ways a new split reaches the replicas.
const (
	ResizeInPlace = "in-place"
	ResizeRestart = "restart"
)

// Dense synchronisation methods (dense_sync). Auto lets the coordinator
// pick per stage, allreduce where the stage has several replicas and
// enough dense bytes to move (daemon/coord's denseSync).
const (
	DenseSyncAuto      = "auto"
	DenseSyncAllreduce = "allreduce"
	DenseSyncPS        = "ps"
)

// Batching modes.
const (
	BatchingAuto     = "auto"
	BatchingUniform  = "uniform"
	BatchingVariable = "variable"
	BatchingDynamic  = "dynamic"
)

// JobCheckpoint says where and how often a job checkpoints.
type JobCheckpoint struct {
	Dir   string `toml:"dir"`
	Every int64  `toml:"every"` // steps between checkpoints; 0 = never
	// Restore, if set, is where the job starts from: a checkpoint root
	// (its latest complete step directory) or one step directory. The job
	// then trains the steps after the checkpoint's, up to its own total.
	Restore string `toml:"restore"`
	// Restarts is how often the coordinator restarts the job from its
	// latest complete checkpoint after it failed while running (a node
	// died, a task failed); 0 = never.
	Restarts int `toml:"restarts"`
	// Keep is how many of the job's newest complete checkpoints stay in
	// Dir: the coordinator removes older ones as newer ones complete
	// (DefaultCheckpointKeep when absent; 0 keeps them all).
	Keep *int `toml:"keep"`
}

// DefaultCheckpointKeep is checkpoint.keep when absent: a week of
// checkpoints every few minutes would otherwise fill the disk they share.
const DefaultCheckpointKeep = 5

// PipelineLookahead is the job's lookahead, 0 where none applies.
func (j *Job) PipelineLookahead() int {
	if j.Lookahead == nil {
		return 0
	}
	return *j.Lookahead
}

// KeepAll reports whether the job keeps every checkpoint it writes.
func (c JobCheckpoint) KeepAll() bool { return c.Keep == nil || *c.Keep == 0 }

// Pipeline schedules (daemon/pipeline): 1F1B alternates a stage's
// forwards and backwards after a warm-up, holding at most the pipeline's
// depth of micro-batches' activations; fill-drain runs every forward before
// any backward. Both train alike, bit for bit.
const (
	ScheduleOneFOneB  = "1f1b"
	ScheduleFillDrain = "fill-drain"
	// DefaultLookahead is a 1F1B job's lookahead unless its file sets one:
	// on a 2-core VM a 2-stage ctrdnn pipeline ran 6-8 % faster one
	// forward ahead than strict 1F1B (0), and as fast as fill-drain.
	DefaultLookahead = 1
)

// Job defaults and limits.
const (
	// MaxMicroBatches bounds micro_batches (pipeline.MaxMicroBatches).
	MaxMicroBatches  = 32
	DefaultJobMethod = "exact"
	maxJobBatch      = 1 << 24
	maxJobSteps      = 1 << 40
	maxJobRestarts   = 100
)

// LoadJob reads, decodes and validates a job file.
func LoadJob(path string) (*Job, error) {
	var j Job
	src, err := DecodeFile(path, &j)
	if err != nil {
		return nil, err
	}
	return j.finish(NewLocator(path, src))
}

// ParseJob decodes and validates a job file's contents, named name in
// errors.
func ParseJob(name string, src []byte) (*Job, error) {
	var j Job
	if err := Decode(name, src, &j); err != nil {
		return nil, err
	}
	return j.finish(NewLocator(name, src))
}

func (j *Job) finish(loc *Locator) (*Job, error) {
	j.loc = loc
	j.applyDefaults(loc)
	if err := j.validate(loc); err != nil {
		return nil, err
	}
	return j, nil
}

// Errorf returns an error located at field in the job's file, for checks
// made by the job's users (the coordinator checks the method and the data
// spec against what it knows).
func (j *Job) Errorf(field, format string, args ...any) *Error {
	loc := j.loc
	if loc == nil {
		loc = NewLocator("job", nil)
	}
	return loc.Errorf(field, format, args...)
}

// TotalSteps is the number of training steps: Steps, or enough batches to
// cover Epochs x Samples.
func (j *Job) TotalSteps() int64 {
	if j.Steps > 0 {
		return j.Steps
	}
	return int64(math.Ceil(j.Epochs * float64(j.Samples) / float64(j.Batch)))
}

func (j *Job) applyDefaults(loc *Locator) {
	if j.Version == 0 {
		j.Version = 1
	}
	if j.Name == "" {
		j.Name = strings.TrimSuffix(filepath.Base(j.Model), ".toml")
	}
	if j.Method == "" {
		j.Method = DefaultJobMethod
	}
	if j.Mode == "" {
		j.Mode = "bsp"
	}
	if j.Schedule == "" {
		j.Schedule = ScheduleOneFOneB
	}
	if j.Lookahead == nil && j.Schedule == ScheduleOneFOneB {
		lookahead := DefaultLookahead
		j.Lookahead = &lookahead
	}
	if j.Optimizer != nil {
		j.Optimizer.defaults(loc.keysOf("optimizer"))
	}
	if j.DenseSync == "" {
		j.DenseSync, j.DenseSyncDefaulted = defaultDenseSync(j.Checkpoint.Restarts), true
	}
	if j.Checkpoint.Keep == nil {
		keep := DefaultCheckpointKeep
		j.Checkpoint.Keep = &keep
	}
	b := &j.Batching
	if b.Mode == "" {
		b.Mode = BatchingAuto
	}
	if b.Interval == 0 {
		b.Interval = 3
	}
	if b.Smoothing == 0 {
		b.Smoothing = 0.5
	}
	if b.Deadband == 0 {
		b.Deadband = 0.05
	}
	if b.MinBatch == 0 {
		b.MinBatch = 1
	}
	if b.Resize == "" {
		b.Resize = ResizeInPlace
	}
	j.Replan.applyDefaults()
}

func (j *Job) validate(loc *Locator) error {
	var errs errorList
	if j.Version != 1 {
		errs.add(loc.Errorf("version", "unsupported version %d (this heterps reads version 1)", j.Version))
	}
	if j.Model == "" {
		errs.add(loc.Errorf("model", "missing: a zoo name (%s) or a model file", strings.Join(ZooNames(), ", ")))
	}
	if !identifier.MatchString(j.Name) {
		errs.add(loc.Errorf("name", "%q is not a job name (letters, digits, '.', '_' and '-')", j.Name))
	}
	if j.Data == "" {
		errs.add(loc.Errorf("data", "missing: a data spec such as synthetic:1 or criteo:PATH"))
	}
	if j.Batch < 1 || j.Batch > maxJobBatch {
		errs.add(loc.Errorf("batch", "must be in 1..%d, got %d", maxJobBatch, j.Batch))
	}
	j.validateLength(loc, &errs)
	if j.Optimizer != nil {
		if err := j.Optimizer.validate(loc, "optimizer"); err != nil {
			errs = append(errs, err)
		}
	}
	if !finite(j.ThroughputLimit) || j.ThroughputLimit < 0 {
		errs.add(loc.Errorf("throughput_limit", "must be a finite number >= 0, got %g", j.ThroughputLimit))
	}
	if !identifier.MatchString(j.Method) {
		errs.add(loc.Errorf("method", "%q is not a method name", j.Method))
	}
	switch {
	case j.MicroBatches < 0 || j.MicroBatches > MaxMicroBatches:
		errs.add(loc.Errorf("micro_batches", "must be in [0, %d], got %d", MaxMicroBatches, j.MicroBatches))
	case j.Batch > 0 && j.MicroBatches > j.Batch:
		errs.add(loc.Errorf("micro_batches", "%d micro-batches of a batch of %d: each needs a row", j.MicroBatches, j.Batch))
	}
	if j.Schedule != ScheduleOneFOneB && j.Schedule != ScheduleFillDrain {
		errs.add(loc.Errorf("schedule", "unknown schedule %q (want %q or %q)", j.Schedule, ScheduleOneFOneB, ScheduleFillDrain))
	}
	switch la := j.Lookahead; {
	case la == nil:
	case j.Schedule == ScheduleFillDrain:
		errs.add(loc.Errorf("lookahead", "applies to schedule = %q only (fill-drain runs every forward first)", ScheduleOneFOneB))
	case *la < 0 || *la > MaxMicroBatches:
		errs.add(loc.Errorf("lookahead", "must be in [0, %d], got %d", MaxMicroBatches, *la))
	}
	if j.Mode != "bsp" && j.Mode != "asp" {
		errs.add(loc.Errorf("mode", "unknown mode %q (want bsp or asp)", j.Mode))
	}
	if j.PSType != "" && !identifier.MatchString(j.PSType) {
		errs.add(loc.Errorf("ps_type", "%q is not a type name", j.PSType))
	}
	if !finite(j.PSRatio) || j.PSRatio < 0 {
		errs.add(loc.Errorf("ps_ratio", "must be a finite number >= 0, got %g", j.PSRatio))
	}
	switch {
	case j.Checkpoint.Every < 0:
		errs.add(loc.Errorf("checkpoint.every", "must be >= 0, got %d", j.Checkpoint.Every))
	case j.Checkpoint.Every > 0 && j.Checkpoint.Dir == "":
		errs.add(loc.Errorf("checkpoint.dir", "missing: checkpoint.every needs a directory"))
	}
	if k := j.Checkpoint.Keep; k != nil && *k < 0 {
		errs.add(loc.Errorf("checkpoint.keep", "must be >= 0 (0 keeps every checkpoint), got %d", *k))
	}
	switch {
	case j.Checkpoint.Restarts < 0 || j.Checkpoint.Restarts > maxJobRestarts:
		errs.add(loc.Errorf("checkpoint.restarts", "must be in [0, %d], got %d", maxJobRestarts, j.Checkpoint.Restarts))
	case j.Checkpoint.Restarts > 0 && j.Checkpoint.Every <= 0:
		errs.add(loc.Errorf("checkpoint.restarts", "a restart resumes from a checkpoint: set checkpoint.every"))
	}
	if strings.TrimSpace(j.Checkpoint.Restore) != j.Checkpoint.Restore || strings.ContainsRune(j.Checkpoint.Restore, 0) {
		errs.add(loc.Errorf("checkpoint.restore", "%q is not a usable path", j.Checkpoint.Restore))
	}
	if strings.TrimSpace(j.Profile) != j.Profile || strings.ContainsRune(j.Profile, 0) {
		errs.add(loc.Errorf("profile", "%q is not a usable path", j.Profile))
	}
	j.validateBatching(loc, &errs)
	j.validateDenseSync(loc, &errs)
	j.validateAlloc(loc, &errs)
	j.validateReplan(loc, &errs)
	return errs.err()
}

// defaultDenseSync is dense_sync where the file names none: auto (allreduce
// where measured or sized to win) for a job that restarts from its
// checkpoints after a failure, the parameter servers otherwise (for
// stages of several replicas: one replica keeps its dense parameters to
// itself either way, daemon/coord's denseSync). An
// allreduce stage cannot shrink in place when a replica's node dies; it
// restarts the job from its newest checkpoint, on the survivors below its
// throughput_limit if need be, so only a job allowed restarts can afford
// it — and gains its speed (2 nodes 15 %, 4 nodes 20 % at batch 512 in
// the latest Zen 5 recording).
func defaultDenseSync(restarts int) string {
	if restarts > 0 {
		return DenseSyncAuto
	}
	return DenseSyncPS
}

// validateDenseSync checks dense_sync. A restored job may sync by
// allreduce: its replicas load the dense values and optimiser state the
// parameter servers restored.
func (j *Job) validateDenseSync(loc *Locator, errs *errorList) {
	switch j.DenseSync {
	case DenseSyncAuto, DenseSyncPS:
		return
	case DenseSyncAllreduce:
	default:
		errs.add(loc.Errorf("dense_sync", "unknown method %q (want auto, allreduce or ps)", j.DenseSync))
		return
	}
	if j.Mode == "asp" {
		errs.add(loc.Errorf("dense_sync", "allreduce needs mode = \"bsp\" (asynchronous replicas share no step to reduce)"))
	}
}

// AllreduceAllowed reports whether dense_sync = "auto" may pick allreduce
// for this job: BSP.
func (j *Job) AllreduceAllowed() bool {
	return j.Mode != "asp"
}

func (j *Job) validateBatching(loc *Locator, errs *errorList) {
	b := j.Batching
	switch b.Mode {
	case BatchingAuto, BatchingUniform, BatchingVariable, BatchingDynamic:
	default:
		errs.add(loc.Errorf("batching.mode", "unknown mode %q (want auto, uniform, variable or dynamic)", b.Mode))
	}
	if b.Interval < 1 || b.Interval > maxJobSteps {
		errs.add(loc.Errorf("batching.interval", "must be in 1..%d steps, got %d", int64(maxJobSteps), b.Interval))
	}
	if !finite(b.Smoothing) || b.Smoothing < 0 || b.Smoothing >= 1 {
		errs.add(loc.Errorf("batching.smoothing", "must be in [0, 1), got %g", b.Smoothing))
	}
	if !finite(b.Deadband) || b.Deadband < 0 || b.Deadband >= 1 {
		errs.add(loc.Errorf("batching.deadband", "must be in [0, 1), got %g", b.Deadband))
	}
	if b.MinBatch < 1 || (j.Batch > 0 && b.MinBatch > j.Batch) {
		errs.add(loc.Errorf("batching.min_batch", "must be in 1..batch (%d), got %d", j.Batch, b.MinBatch))
	}
	switch {
	case b.Resize != ResizeInPlace && b.Resize != ResizeRestart:
		errs.add(loc.Errorf("batching.resize", "unknown way %q (want %q or %q)", b.Resize, ResizeInPlace, ResizeRestart))
	case b.Resize == ResizeRestart && j.Checkpoint.Every <= 0:
		errs.add(loc.Errorf("batching.resize", "%q restarts from a checkpoint: set checkpoint.every", b.Resize))
	case b.Resize == ResizeRestart && j.Mode == "asp":
		errs.add(loc.Errorf("batching.resize", "%q is built for BSP jobs; an ASP job resizes in place", b.Resize))
	}
}

// validateLength checks that exactly one of steps and epochs says how long
// to train, and that the run is not absurdly long.
func (j *Job) validateLength(loc *Locator, errs *errorList) {
	switch {
	case j.Steps < 0:
		errs.add(loc.Errorf("steps", "must be > 0, got %d", j.Steps))
	case !finite(j.Epochs) || j.Epochs < 0:
		errs.add(loc.Errorf("epochs", "must be a finite number > 0, got %g", j.Epochs))
	case j.Steps > 0 && j.Epochs > 0:
		errs.add(loc.Errorf("epochs", "give steps or epochs, not both"))
	case j.Steps == 0 && j.Epochs == 0:
		errs.add(loc.Errorf("steps", "missing: give steps, or epochs with samples"))
	case j.Epochs > 0 && j.Samples <= 0:
		errs.add(loc.Errorf("samples", "epochs needs samples per epoch > 0, got %d", j.Samples))
	case j.Batch > 0 && (j.Steps > maxJobSteps || j.Epochs*float64(j.Samples)/float64(j.Batch) > maxJobSteps):
		errs.add(loc.Errorf("steps", "more than %d steps", int64(maxJobSteps)))
	}
}

// ModelFile returns the text of m's model file as the job trains it: with
// the job's optimizer in place of the model's when the job overrides it.
// Nodes receive this text, so they need no files. The text is checked to
// parse back into the same model.
func (j *Job) ModelFile(m *Model) ([]byte, error) {
	eff := *m
	if j.Optimizer != nil {
		eff.Optimizer = *j.Optimizer
	}
	src, err := toml.Marshal(&eff)
	if err != nil {
		return nil, fmt.Errorf("job %s: model %s: %w", j.Name, m.Name, err)
	}
	if _, err := ParseModel(m.Name, src); err != nil {
		return nil, fmt.Errorf("job %s: model %s does not survive re-encoding: %w", j.Name, m.Name, err)
	}
	return src, nil
}
