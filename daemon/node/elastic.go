package node

import (
	"errors"
	"fmt"
	"slices"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/pipeline"
)

// updateTask applies spec, a newer Generation of the running task old (the
// same TaskID): a stage replica resizes its worker (pipeline.Worker.Resize)
// from spec.FromStep, or from the first step whose input it has not read
// yet if that is later; a PS task makes its shards of the job take
// spec.Members from spec.FromStep (ps.Shard.SetMembers). A task whose
// worker or shards are not up yet applies its latest spec once they are.
// An older or equal Generation changes nothing else; a PS task's later
// CheckpointAt goes to the job's checkpoint loop whatever the generation
// (asked.go).
func (a *Agent) updateTask(old *task, spec api.Task) error {
	fail := func(err error) error {
		return fmt.Errorf("update task %s to generation %d: %w", spec.TaskID, spec.Generation, err)
	}
	a.noteAsked(old, spec)
	if !a.newerGeneration(old, spec) {
		return nil
	}
	if a.updateUnits(old, spec) {
		return nil
	}
	if err := checkElastic(old.spec, spec); err != nil {
		return fail(err)
	}
	a.mu.Lock()
	if spec.Generation <= old.current().Generation {
		a.mu.Unlock()
		return nil
	}
	old.latest = &spec
	w := old.worker
	a.mu.Unlock()
	if spec.Role == api.RolePS {
		return a.applyMembers(spec)
	}
	if w == nil {
		return nil // stageWorker applies it
	}
	from, err := w.Resize(spec.FromStep, specShare(spec))
	if err != nil {
		return fail(err)
	}
	a.taskLog(spec).Info("stage resized", "generation", spec.Generation, "from", from, "members", spec.Members)
	return nil
}

// newerGeneration reports whether spec is a newer generation of t.
func (a *Agent) newerGeneration(t *task, spec api.Task) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return spec.Generation > t.current().Generation
}

// checkElastic checks a new spec against the running one: the same task
// and job, a membership and batches that fit together.
func checkElastic(old, spec api.Task) error {
	switch {
	case spec.TaskID != old.TaskID || spec.JobID != old.JobID || spec.Role != old.Role:
		return fmt.Errorf("task %s of job %s (%s) cannot become task %s of job %s (%s)",
			old.TaskID, old.JobID, old.Role, spec.TaskID, spec.JobID, spec.Role)
	case spec.FromStep < 1:
		return fmt.Errorf("from_step %d, want >= 1", spec.FromStep)
	case len(spec.Members) == 0:
		return errors.New("members: empty")
	case spec.Role == api.RoleStage && len(spec.Batches) != len(spec.Members):
		return fmt.Errorf("%d batches for %d members", len(spec.Batches), len(spec.Members))
	}
	return nil
}

// specShare is the stage make-up a spec gives from FromStep on.
// A DataStart makes it exact (pipeline.Share.Start).
func specShare(s api.Task) pipeline.Share {
	return pipeline.Share{Members: slices.Clone(s.Members), Batches: slices.Clone(s.Batches), Next: slices.Clone(s.NextBatches), Start: s.DataStart}
}

// segmentReport is the data segment in's reader is in, as reports carry
// it (api.TaskReport.Segment); nil without an input.
func segmentReport(in *pipeline.ShardedInput) *api.DataSegment {
	if in == nil {
		return nil
	}
	seg := in.Segment()
	return &api.DataSegment{From: seg.From, Start: seg.Start, Members: seg.Share.Members, Batches: seg.Share.Batches,
		At: seg.At, Position: seg.Position}
}

// firstShare is the make-up a stage task starts with: its Members and
// Batches if it has them (a replica joining a running stage), else
// replicas 0..Replicas-1 with Batches, or each with this replica's batch
// when Batches is not given.
func firstShare(s api.Task) pipeline.Share {
	if len(s.Members) > 0 {
		return specShare(s)
	}
	sh := pipeline.Share{Members: make([]int, s.Replicas), Batches: make([]int, s.Replicas), Next: slices.Clone(s.NextBatches)}
	for i := range s.Replicas {
		sh.Members[i], sh.Batches[i] = i, s.Batch
		if len(s.Batches) == s.Replicas {
			sh.Batches[i] = s.Batches[i]
		}
	}
	return sh
}

// segmentStart is the step the first data segment of a stage task starts
// at: FromStep for a task that starts with a membership, else 1.
func segmentStart(s api.Task) int64 {
	if len(s.Members) > 0 {
		return max(s.FromStep, 1)
	}
	return 1
}

// applyMembers gives this node's shards of the job the spec's membership,
// if they are up (runPS applies the latest spec once they are).
func (a *Agent) applyMembers(spec api.Task) error {
	if spec.Generation == 0 || len(spec.Members) == 0 {
		return nil
	}
	s := a.ps.local(spec.JobID, spec.Shard)
	if s == nil {
		return nil
	}
	if err := s.SetMembers(spec.Stage, spec.FromStep, spec.Members); err != nil {
		return fmt.Errorf("task %s: %w", spec.TaskID, err)
	}
	return nil
}

// current is the task's latest spec: its last update, else the spec it
// started with. Under Agent.mu.
func (t *task) current() api.Task {
	if t.latest != nil {
		return *t.latest
	}
	return t.spec
}

// applyLatestMembers gives the job's shards on this node the membership of
// each PS task's latest spec: updates that came before the shards were up.
func (a *Agent) applyLatestMembers(tasks []*task) error {
	var errs []error
	for _, t := range tasks {
		a.mu.Lock()
		spec := t.current()
		a.mu.Unlock()
		errs = append(errs, a.applyMembers(spec))
	}
	return errors.Join(errs...)
}

// attachWorker records a stage task's worker, so that updates reach it,
// and its input (nil past stage 0), so that reports carry its data
// segment; it applies the task's latest update if one came while they
// were built.
func (a *Agent) attachWorker(t *task, w *pipeline.Worker, in *pipeline.ShardedInput) error {
	a.mu.Lock()
	t.worker, t.input = w, in
	update := pendingResize(t)
	a.mu.Unlock()
	if update == nil {
		return nil
	}
	if _, err := w.Resize(update.FromStep, specShare(*update)); err != nil {
		return fmt.Errorf("task %s: generation %d: %w", update.TaskID, update.Generation, err)
	}
	return nil
}

// inputAhead is how many batches stage 0 reads ahead of its step, as
// heterps train does: the generator's draws and a file's parsing then run
// beside the step instead of inside it.
const inputAhead = 2

// shardedInput reads stage 0's data through a pipeline.ShardedInput: its
// first segment starts at segmentStart at record DataStart, and src, if
// not nil, is already positioned for step FirstStep+1. Each segment's data
// is read again from the start whenever it ends.
func shardedInput(s api.Task, base data.Options, src data.Source) *pipeline.ShardedInput {
	in := &pipeline.ShardedInput{Replica: s.Replica, Base: base, Ahead: inputAhead, Open: func(o data.Options) (data.Source, error) {
		first := true
		return data.Repeat(func() (data.Source, error) {
			if !first {
				o.Start = 0
			}
			first = false
			return data.Open(s.Data, o)
		})
	}}
	in.Begin(segmentStart(s), s.DataStart, firstShare(s), src, s.FirstStep+1)
	return in
}
