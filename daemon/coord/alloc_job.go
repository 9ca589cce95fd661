package coord

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/heterps/heterps/daemon/alloc"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/store"
)

// jobAlloc is what the allocator records of a running job: its loss
// history and step times from the reports, its units, the last epoch's fit
// and the trace lines not written yet.
type jobAlloc struct {
	history []alloc.Point
	samples []alloc.StepSample
	units   int
	// changedAt is when units last changed; lastStep and lastAt the step
	// and time of the last report that advanced.
	changedAt time.Time
	lastStep  int64
	lastAt    time.Time
	started   time.Time
	curve     *alloc.Curve
	quality   float64
	trace     *jobTrace
	// savedAt is when the job's record last took its history (saveProgress).
	savedAt time.Time
}

// jobTrace is a job's trace file and the lines not written to it yet.
type jobTrace struct {
	path    string
	pending []alloc.TraceLine
	failed  bool // a write failed: the trace is given up (logged once)
}

// allocStart sets up j's record when it starts running, if the allocator
// runs or the job asks for a trace or a target, and under a policy gives
// its stage task the CPU share of its units. c.mu is held.
func (c *Coordinator) allocStart(j *job, now time.Time) {
	j.alloc = nil
	if !c.tracks(j) {
		return
	}
	j.alloc = newJobAlloc(j, now)
	if t := j.managedTask(); t != nil && c.allocPolicy() != "" {
		t.task.TaskCPUShare = t.node.taskShare(t.task.Units)
	}
}

// tracks reports whether the coordinator records j's progress.
func (c *Coordinator) tracks(j *job) bool {
	return c.allocPolicy() != "" || j.file.Trace != "" || j.file.TargetLossReduction > 0
}

// newJobAlloc is an empty record of running job j, holding the units its
// stage task has.
func newJobAlloc(j *job, now time.Time) *jobAlloc {
	a := &jobAlloc{changedAt: now, lastAt: now, started: now}
	if !j.started.IsZero() {
		a.started = j.started
	}
	if j.file.Trace != "" {
		a.trace = &jobTrace{path: j.file.Trace}
	}
	if t := j.managedTask(); t != nil {
		a.units = t.task.Units
	}
	return a
}

// recordProgress adds a report's step and loss to its job's history, and
// the time per step since the previous report to its step samples. Only
// the first task of the last stage is recorded (its loss is the job's).
// c.mu is held.
func (c *Coordinator) recordProgress(t *taskRun, r api.TaskReport, now time.Time) {
	j := t.job
	if j.alloc == nil && j.state == api.JobRunning && c.tracks(j) {
		// Adopted after a restart of the coordinator: the record goes on
		// from the history its job record kept (its first loss, L_0,
		// included), or starts here.
		j.alloc = newJobAlloc(j, now)
		j.alloc.takeProgress(j.heldProgress)
		j.heldProgress = nil
	}
	a := j.alloc
	if a == nil || r.Step <= a.lastStep || !finiteLoss(r.Loss) || t != j.lossTask() {
		return
	}
	line := alloc.TraceLine{T: now.Sub(a.started).Seconds(), Step: r.Step, Loss: r.Loss, Units: t.task.Units}
	settled := a.changedAt.Add(c.cfg.HeartbeatInterval) // the change has reached the node and a step of it
	if a.lastStep > 0 && !a.lastAt.Before(settled) {
		s := alloc.StepSample{Units: t.task.Units, Seconds: now.Sub(a.lastAt).Seconds() / float64(r.Step-a.lastStep)}
		if s.Seconds > 0 {
			a.samples = append(a.samples, s)
			if len(a.samples) > maxStepSamples {
				a.samples = a.samples[len(a.samples)-maxStepSamples:]
			}
			line.StepSeconds = s.Seconds
		}
	}
	a.lastStep, a.lastAt = r.Step, now
	a.history = thin(append(a.history, alloc.Point{Iter: float64(r.Step), Loss: r.Loss}))
	if a.trace != nil && !a.trace.failed {
		a.trace.pending = append(a.trace.pending, line)
	}
}

func finiteLoss(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// lossTask is the task whose reports give j's loss: the first of its last
// stage.
func (j *job) lossTask() *taskRun {
	if j.plan == nil {
		return nil
	}
	last := len(j.plan.Stages) - 1
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage && t.task.Stage == last {
			return t
		}
	}
	return nil
}

// thin keeps a history within maxHistory points: past it, every other
// point of the older half goes (the first point, L_0, stays).
func thin(h []alloc.Point) []alloc.Point {
	if len(h) <= maxHistory {
		return h
	}
	half := len(h) / 2
	out := h[:1]
	for i := 2; i < half; i += 2 {
		out = append(out, h[i])
	}
	return append(out, h[half:]...)
}

// tracePending is a trace's lines to write.
type tracePending struct {
	job   string
	trace *jobTrace
	lines []alloc.TraceLine
}

// takeTraces takes every job's unwritten trace lines. c.mu is held.
func (c *Coordinator) takeTraces() []tracePending {
	var out []tracePending
	for _, j := range c.jobs {
		if j.alloc == nil || j.alloc.trace == nil || len(j.alloc.trace.pending) == 0 {
			continue
		}
		tr := j.alloc.trace
		out = append(out, tracePending{job: j.id, trace: tr, lines: tr.pending})
		tr.pending = nil
	}
	return out
}

// writeTraces appends the lines to their trace files, off c.mu. A trace
// that cannot be written is logged and given up.
func (c *Coordinator) writeTraces(ts []tracePending) {
	for _, p := range ts {
		if err := appendTrace(p.trace.path, p.lines); err != nil {
			c.log.Warn("job trace given up", "id", p.job, "err", err)
			c.mu.Lock()
			p.trace.failed, p.trace.pending = true, nil
			c.mu.Unlock()
		}
	}
}

// appendTrace appends lines to the JSON-lines file at path.
func appendTrace(path string, lines []alloc.TraceLine) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("trace %s: step %d: %w", path, l.Step, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("trace %s: %w", path, err)
	}
	return nil
}

// jobAllocStatus is the alloc part of j's status. c.mu is held.
func (c *Coordinator) jobAllocStatus(j *job) *api.JobAlloc {
	a := j.alloc
	if a == nil || len(a.history) == 0 {
		return nil
	}
	last := a.history[len(a.history)-1]
	s := &api.JobAlloc{Units: a.units, Loss: last.Loss, Quality: a.quality, Target: j.file.TargetLossReduction,
		Priority: j.file.JobPriority()}
	if a.curve != nil {
		if p := a.curve.Predict(last.Iter); finiteLoss(p) {
			s.PredictedLoss = p
		}
	}
	return s
}

// progressRecord is what j's record keeps of its history: the allocator's,
// or, while j waits to be adopted, what its record held. nil: none.
func (j *job) progressRecord() *store.Progress {
	a := j.alloc
	if a == nil {
		return j.heldProgress
	}
	if len(a.history) == 0 && len(a.samples) == 0 {
		return nil
	}
	p := &store.Progress{}
	for _, pt := range a.history {
		p.Losses = append(p.Losses, store.LossPoint{Step: pt.Iter, Loss: pt.Loss})
	}
	for _, sm := range a.samples {
		p.Steps = append(p.Steps, store.StepSample{Units: sm.Units, Seconds: sm.Seconds})
	}
	return p
}

// checkProgress refuses a record's history the coordinator could not have
// kept: too long, a loss not finite, steps out of order, a step time
// without units or not finite and positive.
func checkProgress(p *store.Progress) error {
	switch {
	case p == nil:
		return nil
	case len(p.Losses) > maxHistory || len(p.Steps) > maxStepSamples:
		return fmt.Errorf("%d losses, %d step times: at most %d and %d are kept", len(p.Losses), len(p.Steps), maxHistory, maxStepSamples)
	}
	for i, pt := range p.Losses {
		if !finiteLoss(pt.Loss) || !finiteLoss(pt.Step) || (i > 0 && pt.Step <= p.Losses[i-1].Step) {
			return fmt.Errorf("loss %d: step %g, loss %g: want finite values at ascending steps", i, pt.Step, pt.Loss)
		}
	}
	for i, sm := range p.Steps {
		if sm.Units < 1 || !(sm.Seconds > 0) || math.IsInf(sm.Seconds, 0) {
			return fmt.Errorf("step time %d: %g s on %d units: want a positive finite time on at least one unit", i, sm.Seconds, sm.Units)
		}
	}
	return nil
}

// takeProgress gives a the history p (nil: none) its job's record kept:
// the next report adds to it past its last step.
func (a *jobAlloc) takeProgress(p *store.Progress) {
	if p == nil {
		return
	}
	for _, pt := range p.Losses {
		a.history = append(a.history, alloc.Point{Iter: pt.Step, Loss: pt.Loss})
	}
	for _, sm := range p.Steps {
		a.samples = append(a.samples, alloc.StepSample{Units: sm.Units, Seconds: sm.Seconds})
	}
	if n := len(a.history); n > 0 {
		a.lastStep = int64(a.history[n-1].Iter)
	}
}

// progressSaveEvery spaces the records of a tracked job written for its
// history alone, once it holds more than progressSaveSmall losses; a
// shorter history (a few KiB) is written at every allocator epoch, so that
// the losses a young job's curve is fitted on are not lost.
const (
	progressSaveEvery = 30 * time.Second
	progressSaveSmall = 256
)

// saveProgress writes the record of each tracked running job whose
// history is due (progressSaveEvery), so that a restarted coordinator
// goes on from it (a target loss reduction counts from the job's first
// loss, not from where the restart found it). c.mu is held.
func (c *Coordinator) saveProgress(now time.Time) {
	for _, j := range c.jobs {
		a := j.alloc
		if j.state != api.JobRunning || a == nil || len(a.history) == 0 {
			continue
		}
		if len(a.history) <= progressSaveSmall || now.Sub(a.savedAt) >= progressSaveEvery {
			a.savedAt = now
			c.save(j)
		}
	}
}
