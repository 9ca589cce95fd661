package node

import (
	"context"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// Units of a running stage task. The coordinator's allocator changes a
// replica's units in place: a newer Generation of the task that differs
// from the running spec only in Units and TaskCPUShare. The worker's
// backend keeps the threads it started with (GEMMs split by thread count
// round differently, and a job's math must not depend on its allocation);
// the units take effect through the task's CPU share, a duty cycle after
// each step's compute, so that a step on u of a node's N units takes
// compute x N/u: t(u) = C/u + O, the allocator's step model.

// updateUnits records spec as the task's latest when it changes units or
// the task's CPU share only, and reports whether it did; the worker reads
// the share at its next step.
func (a *Agent) updateUnits(t *task, spec api.Task) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := t.current()
	if spec.Generation <= cur.Generation || !unitsOnly(cur, spec) {
		return false
	}
	t.latest = &spec
	a.log.Info("task units changed", "task", spec.TaskID, "generation", spec.Generation, "units", spec.Units,
		"task_cpu_share", spec.TaskCPUShare)
	return true
}

// unitsOnly reports whether spec differs from cur in nothing the worker
// must be rebuilt or resized for: the same task, membership, batches and
// starting step.
func unitsOnly(cur, spec api.Task) bool {
	return spec.TaskID == cur.TaskID && spec.JobID == cur.JobID && spec.Role == api.RoleStage && cur.Role == api.RoleStage &&
		spec.FromStep == cur.FromStep && spec.Batch == cur.Batch &&
		slices.Equal(spec.Members, cur.Members) && slices.Equal(spec.Batches, cur.Batches)
}

// taskShare is the task's CPU share now: its latest spec's, 1 when none.
func (a *Agent) taskShare(t *task) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := t.current().TaskCPUShare; s > 0 && s < 1 {
		return s
	}
	return 1
}

// afterTaskCompute runs the task's duty cycle after a step whose compute
// took compute: it sleeps (1/share - 1) x compute and returns how long, with
// false if ctx ended first.
func (a *Agent) afterTaskCompute(ctx context.Context, t *task, compute time.Duration) (time.Duration, bool) {
	d := dutyCycleSleep(a.taskShare(t), compute)
	if d <= 0 {
		return 0, true
	}
	return d, a.throttle.sleep(ctx, d)
}

// pendingResize is the update a stage task's worker, just built, must
// apply: its latest, unless none came or it changes units only (the
// worker reads those at each step). Under Agent.mu.
func pendingResize(t *task) *api.Task {
	if t.latest == nil || unitsOnly(t.spec, *t.latest) {
		return nil
	}
	return t.latest
}
