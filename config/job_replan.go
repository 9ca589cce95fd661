package config

// JobReplan turns on HeterPS' Algorithm 1 for a job: the coordinator
// corrects the job's profile with the throughput its stages reach, plans
// again at checkpoint boundaries and moves the job when that pays.
type JobReplan struct {
	Enabled bool `toml:"enabled"`
	// Gain is the least relative drop of the predicted cost of the rest of
	// the run, the move paid, that moves the job.
	Gain float64 `toml:"gain"`
	// Warmup is the steps after each start before measurements count
	// (start-up, first batches and lagging reports skew them).
	Warmup int64 `toml:"warmup"`
	// Smoothing is the EMA weight of a new measurement.
	Smoothing float64 `toml:"smoothing"`
	// MoveSeconds is the start-up time a move is charged until the job's
	// own moves or restarts measured one.
	MoveSeconds float64 `toml:"move_seconds"`
}

// Defaults of [replan].
const (
	DefaultReplanGain        = 0.05
	DefaultReplanWarmup      = 20
	DefaultReplanSmoothing   = 0.5
	DefaultReplanMoveSeconds = 30
)

func (r *JobReplan) applyDefaults() {
	if r.Gain == 0 {
		r.Gain = DefaultReplanGain
	}
	if r.Warmup == 0 {
		r.Warmup = DefaultReplanWarmup
	}
	if r.Smoothing == 0 {
		r.Smoothing = DefaultReplanSmoothing
	}
	if r.MoveSeconds == 0 {
		r.MoveSeconds = DefaultReplanMoveSeconds
	}
}

// validateReplan checks [replan]: a move restores from a checkpoint, so
// an enabled job checkpoints and runs BSP.
func (j *Job) validateReplan(loc *Locator, errs *errorList) {
	r := j.Replan
	if !finite(r.Gain) || r.Gain < 0 || r.Gain >= 1 {
		errs.add(loc.Errorf("replan.gain", "must be in [0, 1), got %g", r.Gain))
	}
	if r.Warmup < 0 {
		errs.add(loc.Errorf("replan.warmup", "must be >= 0, got %d", r.Warmup))
	}
	if !finite(r.Smoothing) || r.Smoothing <= 0 || r.Smoothing > 1 {
		errs.add(loc.Errorf("replan.smoothing", "must be in (0, 1], got %g", r.Smoothing))
	}
	if !finite(r.MoveSeconds) || r.MoveSeconds < 0 {
		errs.add(loc.Errorf("replan.move_seconds", "must be a finite number >= 0, got %g", r.MoveSeconds))
	}
	switch {
	case !r.Enabled:
	case j.Checkpoint.Every <= 0:
		errs.add(loc.Errorf("replan.enabled", "a re-planned job moves by restoring a checkpoint: set checkpoint.every"))
	case j.Mode != "bsp":
		errs.add(loc.Errorf("replan.enabled", "only BSP jobs are re-planned, not %s ones", j.Mode))
	}
}
