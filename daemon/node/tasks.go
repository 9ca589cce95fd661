package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/ps"
)

// task is one assignment the node holds: its spec, how to stop it and its
// latest report. Stage tasks run on a goroutine each; the PS tasks of a
// job share one (runPS).
type task struct {
	spec   api.Task
	cancel context.CancelFunc

	report api.TaskReport // guarded by Agent.mu
	// latest is the newest update of spec (elastic.go), worker the stage's
	// worker once built; both guarded by Agent.mu.
	latest *api.Task
	worker *pipeline.Worker
	input  *pipeline.ShardedInput // stage 0's, once built; guarded by Agent.mu
	// asks, on a PS task, is shared by the job's PS tasks on this node:
	// the checkpoints asked for while the job runs (asked.go).
	asks *asks
}

// reports lists the report of every task the node holds, in task id order.
func (a *Agent) reports() []api.TaskReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reportsLocked()
}

// reportsLocked is reports with a.mu held.
func (a *Agent) reportsLocked() []api.TaskReport {
	out := make([]api.TaskReport, 0, len(a.tasks))
	for _, id := range slices.Sorted(maps.Keys(a.tasks)) {
		t := a.tasks[id]
		r := t.report
		r.Segment = segmentReport(t.input)
		out = append(out, r)
	}
	return out
}

// setReport updates a task's report with f, unless the task was cancelled:
// a cancelled task is gone from the coordinator's view and reports nothing
// more.
func (a *Agent) setReport(ctx context.Context, t *task, f func(r *api.TaskReport)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ctx.Err() == nil {
		f(&t.report)
	}
}

// setReports applies f to the report of each of tasks (setReport).
func (a *Agent) setReports(ctx context.Context, tasks []*task, f func(r *api.TaskReport)) {
	for _, t := range tasks {
		a.setReport(ctx, t, f)
	}
}

// failAll marks each of tasks failed with err.
func (a *Agent) failAll(ctx context.Context, tasks []*task, err error) {
	for _, t := range tasks {
		a.fail(ctx, t, err)
	}
}

// fail marks t failed with err.
func (a *Agent) fail(ctx context.Context, t *task, err error) {
	a.taskLog(t.spec).Warn("task failed", "err", err)
	msg := truncateError(err.Error())
	permanent := isPermanent(err)
	a.setReport(ctx, t, func(r *api.TaskReport) { r.State, r.Error, r.Permanent = api.TaskFailed, msg, permanent })
}

// truncateError cuts msg to what a task report may carry.
func truncateError(msg string) string {
	if len(msg) > api.MaxErrorLen {
		return msg[:api.MaxErrorLen]
	}
	return msg
}

// isLate reports whether err is an exact change that came after its step
// (a worker had read its input, a shard had applied it): the task goes on
// as it was, and the coordinator calls the change off.
func isLate(err error) bool {
	return errors.Is(err, pipeline.ErrLate) || errors.Is(err, ps.ErrLate)
}

// late reports that t could not take the exact change of spec's
// generation at its step, and goes on without it.
func (a *Agent) late(ctx context.Context, t *task, spec api.Task, err error) {
	a.taskLog(t.spec).Warn("an exact change came late; going on without it", "generation", spec.Generation, "err", err)
	a.setReport(ctx, t, func(r *api.TaskReport) { r.Late = spec.Generation })
}

// permanentError is a deterministic failure: the task's input (model,
// data, memory it needs) is wrong, so running it again would fail again.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// permanent marks err deterministic.
func permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// isPermanent reports whether err is deterministic: marked so, a
// malformed line of the data or a data path the readers refuse.
func isPermanent(err error) bool {
	var line *data.LineError
	var file *data.FileError
	return errors.As(err, new(permanentError)) || errors.As(err, &line) || errors.As(err, &file)
}

// reconcile makes the node run exactly the tasks of a heartbeat reply:
// tasks that left the reply are cancelled and forgotten, new ones started,
// and running ones given a newer generation updated (updateTask).
func (a *Agent) reconcile(ctx context.Context, specs []api.Task) {
	for _, u := range a.replaceTasks(ctx, specs) {
		err := a.updateTask(u.task, u.spec)
		switch {
		case isLate(err):
			a.late(ctx, u.task, u.spec, err)
		case err != nil:
			a.fail(ctx, u.task, err)
		}
	}
}

// shareAsks gives a job's new PS tasks one record of the checkpoints
// asked for, starting from the latest any of them carries.
func shareAsks(tasks []*task) {
	var at int64
	for _, t := range tasks {
		at = max(at, t.spec.CheckpointAt)
	}
	k := newAsks(at)
	for _, t := range tasks {
		t.asks = k
	}
}

// update is a newer generation of a running task, or a later checkpoint
// asked of a PS task.
type update struct {
	task *task
	spec api.Task
}

// replaceTasks cancels the tasks that left specs and starts the new ones; it
// returns the running tasks that specs gives a newer generation.
func (a *Agent) replaceTasks(ctx context.Context, specs []api.Task) []update {
	want := map[string]api.Task{}
	for _, s := range specs {
		want[s.TaskID] = s
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, t := range a.tasks {
		if _, ok := want[id]; !ok {
			a.taskLog(t.spec).Info("task stopped")
			t.cancel()
			delete(a.tasks, id)
		}
	}
	newPS := map[string][]*task{}
	var updates []update
	for _, s := range specs {
		if t, ok := a.tasks[s.TaskID]; ok {
			if s.Generation > t.current().Generation || newerAsk(t, s) {
				updates = append(updates, update{t, s})
			}
			continue
		}
		// A task that starts after step FirstStep has those steps behind it.
		t := &task{spec: s, cancel: func() {}, report: api.TaskReport{TaskID: s.TaskID, State: api.TaskRunning, Step: s.FirstStep}}
		a.tasks[s.TaskID] = t
		if err := a.check(s); err != nil {
			t.report.State, t.report.Error = api.TaskFailed, err.Error()
			continue
		}
		a.taskLog(s).Info("task assigned", "role", s.Role)
		if s.Role == api.RolePS {
			newPS[s.JobID] = append(newPS[s.JobID], t)
			continue
		}
		tctx, cancel := context.WithCancel(ctx)
		t.cancel = cancel
		a.wg.Go(func() { a.contained(tctx, []*task{t}, func() { a.runStage(tctx, t) }) })
	}
	for _, job := range slices.Sorted(maps.Keys(newPS)) {
		tasks := newPS[job]
		shareAsks(tasks)
		jctx, cancel := context.WithCancel(ctx)
		shareCancel(tasks, cancel)
		a.wg.Go(func() { a.contained(jctx, tasks, func() { a.runPS(jctx, tasks) }) })
	}
	return updates
}

// contained runs f, a task's body, turning a panic in it into the failure
// of tasks, its stack in the log, instead of the end of the node daemon:
// the node's other jobs' tasks go on.
func (a *Agent) contained(ctx context.Context, tasks []*task, f func()) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		a.taskLog(tasks[0].spec).Error("task panicked: a bug in heterps; the task fails, the node goes on", "panic", p, "stack", string(debug.Stack()))
		a.failAll(ctx, tasks, fmt.Errorf("internal error: %v (a bug in heterps; the node's log has the stack)", p))
	}()
	f()
}

// shareCancel gives the PS tasks of a job the one cancel of their runPS.
func shareCancel(tasks []*task, cancel context.CancelFunc) {
	for _, t := range tasks {
		t.cancel = cancel
	}
}

// check refuses tasks this node cannot run as given.
func (a *Agent) check(s api.Task) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Plain != a.cfg.Plain {
		return fmt.Errorf("task %s: the job's data plane is plain=%t, node %s is plain=%t", s.TaskID, s.Plain, a.cfg.Name, a.cfg.Plain)
	}
	if len(s.Layout) == 0 {
		return fmt.Errorf("task %s: no stage layout (a coordinator that predates it?)", s.TaskID)
	}
	return nil
}

// stopTasks cancels every task; with a reason it also forgets them (the
// coordinator no longer knows them), else they stay to be reported.
func (a *Agent) stopTasks(reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if reason != "" && len(a.tasks) > 0 {
		a.ownStops++
	}
	for id, t := range a.tasks {
		t.cancel()
		if reason != "" {
			a.taskLog(t.spec).Info("task stopped", "reason", reason)
			delete(a.tasks, id)
		}
	}
}
