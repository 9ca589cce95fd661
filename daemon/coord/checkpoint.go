package coord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/ps"
)

// Checkpoints of running jobs. Each PS node writes its shards' files of a
// step and reports their manifest entries; once every shard of the job has
// reported a step, the coordinator writes that step's manifest (unless the
// node holding every shard already did), which makes the checkpoint
// complete. Both need the checkpoint directory: on one machine, or on a
// filesystem the coordinator and the PS nodes share. Manifests are written
// by a goroutine of their own (manifestLoop), never in a heartbeat's
// handler: an fsync on slow shared storage must not delay other nodes'
// heartbeats.

// jobCheckpoints is what the coordinator knows of a job's checkpoints.
type jobCheckpoints struct {
	restored *api.CheckpointStatus            // where the job started from
	latest   *api.CheckpointStatus            // the latest complete one
	files    map[int64]map[int]ckpt.FileEntry // step -> shard -> file, steps not yet complete
	queued   int64                            // the newest step handed to the manifest writer
	trained  time.Time                        // when every stage finished, while waiting for the last
	// lastWritten is when a PS task last reported writing the last step's
	// checkpoint further (more bytes, or another try).
	lastWritten time.Time
	// failure is the latest checkpoint that could not be written, failures
	// how many files and manifests could not be.
	failure  *api.CheckpointFailure
	failures int64
}

// noteCheckpointFailure records r's checkpoint failure, new since t's
// last report, from node n: training goes on without that checkpoint.
// c.mu is held.
func (c *Coordinator) noteCheckpointFailure(t *taskRun, n *node, r api.TaskReport) {
	j := t.job
	j.ckpt.failures += max(0, r.CheckpointFailures-t.report.CheckpointFailures)
	f, old := r.CheckpointFailure, t.report.CheckpointFailure
	if f == nil || (old != nil && *old == *f) {
		return
	}
	next := "training goes on"
	if f.Step == j.file.TotalSteps() {
		next = "the job has trained; its PS node tries again"
	}
	c.log.Warn("checkpoint not written; "+next, "job", j.id, "step", f.Step, "node", n.req.Name, "task", t.task.TaskID, "err", f.Error)
	if j.ckpt.failure == nil || j.ckpt.failure.Step <= f.Step {
		j.ckpt.failure = &api.CheckpointFailure{Step: f.Step, Node: n.req.Name, Error: f.Error}
	}
	c.askedCheckpointFailed(j, f.Step)
}

// noteCheckpointWriting records when t, a PS task, reported writing its
// job's last checkpoint further than its previous report said. c.mu is
// held.
func noteCheckpointWriting(t *taskRun, r api.TaskReport, now time.Time) {
	w := r.CheckpointWriting
	if w == nil || w.Step != t.job.file.TotalSteps() {
		return
	}
	if old := t.report.CheckpointWriting; old != nil && *old == *w {
		return
	}
	t.job.ckpt.lastWritten = now
}

// checkpointWriting is the newest checkpoint j's PS tasks report writing,
// its bytes summed over them, or nil. c.mu is held.
func (j *job) checkpointWriting() *api.CheckpointWriting {
	var out *api.CheckpointWriting
	for _, t := range j.tasks {
		w := t.report.CheckpointWriting
		switch {
		case w == nil || t.task.Role != api.RolePS:
		case out == nil || w.Step > out.Step:
			out = &api.CheckpointWriting{Step: w.Step, Bytes: w.Bytes}
		case w.Step == out.Step:
			out.Bytes += w.Bytes
		}
	}
	return out
}

// loading lists the nodes of j's PS tasks that report still loading the
// checkpoint j restores. c.mu is held.
func (j *job) loading() []string {
	var out []string
	for _, t := range j.tasks {
		if t.task.Role == api.RolePS && t.report.Loading && !slices.Contains(out, t.nodeName) {
			out = append(out, t.nodeName)
		}
	}
	return out
}

// unresolvedFailure is j's latest checkpoint failure while no
// checkpoint of its step or later is complete, else nil. c.mu is held.
func (j *job) unresolvedFailure() *api.CheckpointFailure {
	f := j.ckpt.failure
	if f == nil || (j.ckpt.latest != nil && j.ckpt.latest.Step >= f.Step) {
		return nil
	}
	return f
}

// manifestWork is a step whose shard files are all in, and the older
// steps some shards wrote and others passed (a checkpoint asked for at a
// step a server had trained beyond): they can never complete, and their
// files go once this step's manifest is written.
type manifestWork struct {
	job       *job
	step      int64
	dir       string
	files     []ckpt.FileEntry
	abandoned []abandonedStep
}

// abandonedStep is a step directory with the shard files a job's servers
// reported writing into it, short of a complete checkpoint.
type abandonedStep struct {
	dir   string
	files []ckpt.FileEntry
}

// verifyDir is ckpt.VerifyDir, a variable so that tests can stand a large
// checkpoint on slow storage in for it.
var verifyDir = ckpt.VerifyDir

// resolveRestore finds the checkpoint a job file's checkpoint.restore
// names: a step directory with a manifest, or a root whose latest complete
// step directory is taken. Only manifests are read: verifyRestore hashes
// the files later.
func resolveRestore(path string) (api.CheckpointStatus, error) {
	if m, err := ckpt.ReadManifest(path); err == nil {
		return api.CheckpointStatus{Step: m.Step, Dir: path, Job: m.JobID}, nil
	} else if !errors.Is(err, ckpt.ErrNoManifest) {
		return api.CheckpointStatus{}, err
	}
	cands, err := chainCheckpoints(path, nil, -1)
	if err != nil {
		return api.CheckpointStatus{}, err
	}
	if len(cands) == 0 {
		return api.CheckpointStatus{}, fmt.Errorf("ckpt: %s: %w", path, ckpt.ErrNoCheckpoint)
	}
	return cands[0], nil
}

// checkRestore resolves j's checkpoint.restore, if any, and checks that
// steps are left to train after it.
func (c *Coordinator) checkRestore(j *job) error {
	jf := j.file
	if jf.Checkpoint.Restore == "" {
		return nil
	}
	cp, err := resolveRestore(jf.Checkpoint.Restore)
	if err != nil {
		return jf.Errorf("checkpoint.restore", "%v", err)
	}
	if cp.Step >= jf.TotalSteps() {
		return jf.Errorf("checkpoint.restore", "%s is of step %d and the job has %d steps: nothing left to train",
			cp.Dir, cp.Step, jf.TotalSteps())
	}
	j.ckpt.restored = &cp
	return nil
}

// verifyRestore hashes every file of the checkpoint j restores. It runs
// without c.mu, in the planner.
func (c *Coordinator) verifyRestore(j *job) (err error) {
	defer c.recoverInto(&err, j.id, "checking its checkpoint")
	if j.ckpt.restored == nil {
		return nil
	}
	if _, err := verifyDir(j.ckpt.restored.Dir); err != nil {
		return j.file.Errorf("checkpoint.restore", "%v", err)
	}
	return nil
}

// firstStep is the number of steps trained before the job started.
func (j *job) firstStep() int64 {
	if j.ckpt.restored == nil {
		return 0
	}
	return j.ckpt.restored.Step
}

// recordCheckpoints takes a PS task's reported shard files and hands every
// step all shards have reported to the manifest writer. c.mu is held.
func (c *Coordinator) recordCheckpoints(t *taskRun, files []api.ShardCheckpoint) {
	j := t.job
	shards := j.psShards()
	for _, f := range files {
		if f.Step <= j.ckpt.queued || (j.ckpt.latest != nil && f.Step <= j.ckpt.latest.Step) {
			continue
		}
		if j.ckpt.files == nil {
			j.ckpt.files = map[int64]map[int]ckpt.FileEntry{}
		}
		if j.ckpt.files[f.Step] == nil {
			j.ckpt.files[f.Step] = map[int]ckpt.FileEntry{}
		}
		j.ckpt.files[f.Step][t.task.Shard] = f.File
		if len(j.ckpt.files[f.Step]) == shards {
			c.queueManifest(j, f.Step)
		}
	}
}

// queueManifest hands a complete step to the manifest writer and forgets
// it and older incomplete steps. c.mu is held.
func (c *Coordinator) queueManifest(j *job, step int64) {
	byShard := j.ckpt.files[step]
	files := make([]ckpt.FileEntry, len(byShard))
	for k := range files {
		files[k] = byShard[k]
	}
	var abandoned []abandonedStep
	for s, byShard := range j.ckpt.files {
		if s < step {
			abandoned = append(abandoned, abandonedStep{dir: ckpt.StepDir(j.file.Checkpoint.Dir, s), files: slices.Collect(maps.Values(byShard))})
		}
		if s <= step {
			delete(j.ckpt.files, s)
		}
	}
	j.ckpt.queued = step
	w := manifestWork{job: j, step: step, dir: ckpt.StepDir(j.file.Checkpoint.Dir, step), files: files, abandoned: abandoned}
	select {
	case c.manifests <- w:
	default:
		c.log.Warn("checkpoint manifest writer is behind; skipping a step", "job", j.id, "step", step)
		j.ckpt.failure = &api.CheckpointFailure{Step: step, Error: "manifest skipped: the writer is behind (a slow or hung checkpoint disk)"}
		j.ckpt.failures++
	}
}

// manifestLoop writes the manifests of complete checkpoints until ctx
// ends.
func (c *Coordinator) manifestLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-c.manifests:
			c.finishManifest(w)
		}
	}
}

// finishManifest writes w's manifest and records it, then removes what
// the newly complete checkpoint makes obsolete: the steps w abandons, and
// checkpoints beyond the job's keep.
func (c *Coordinator) finishManifest(w manifestWork) {
	err := writeManifest(w)
	if err == nil {
		c.removeAbandoned(w)
	}
	c.mu.Lock()
	c.manifestWritten(w, err, time.Now())
	prune := c.pruneOf(w.job, err)
	c.mu.Unlock()
	prune()
}

// pruneOf returns what removes, once one more of j's checkpoints has
// completed, the complete checkpoints under its directory that j or the
// jobs it continues wrote, beyond the newest checkpoint.keep (nothing
// after a failed manifest, or with keep = 0). The returned func deletes
// files and runs without c.mu; pruneOf itself runs with it held.
func (c *Coordinator) pruneOf(j *job, manifestErr error) func() {
	cp := j.file.Checkpoint
	if manifestErr != nil || cp.KeepAll() || cp.Dir == "" {
		return func() {}
	}
	owned, restored := c.chainJobs(j)
	return func() {
		addRestoredJobs(owned, restored) // manifests: read without c.mu
		removed, err := removeBeyond(cp.Dir, *cp.Keep, owned)
		for _, dir := range removed {
			c.log.Info("checkpoint removed", "job", j.id, "dir", dir, "keep", *cp.Keep)
		}
		if err != nil {
			c.log.Warn("removing old checkpoints", "job", j.id, "err", err)
		}
	}
}

// removeBeyond removes the complete checkpoints under root of the jobs in
// owned (chainCheckpoints: by their manifests, in their own step
// directories, links left out) beyond the newest keep of them, and
// returns the directories it removed. A step directory without a manifest
// (one being written, or whose writing died: the step is written again
// over it) and another job's checkpoint stay. keep must be at least 1: the
// newest complete checkpoint is what a restart restores.
func removeBeyond(root string, keep int, owned map[string]bool) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("removing checkpoints under %s: keep %d, want at least 1", root, keep)
	}
	cands, err := chainCheckpoints(root, owned, -1)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, c := range cands[min(keep, len(cands)):] {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, c.Dir)
	}
	return removed, errors.Join(errs...)
}

// removeAbandoned removes the files of w's abandoned steps, each named by
// the server that wrote it, and then their directories if that left them
// empty: whatever else is there (a file being written when its writer
// died, something a person put there) stays, and so does the directory. A
// step directory that has a manifest is complete, whoever completed it,
// and stays whole.
func (c *Coordinator) removeAbandoned(w manifestWork) {
	for _, a := range w.abandoned {
		if _, err := ckpt.ReadManifest(a.dir); err == nil { // completed after all (another job sharing the directory?)
			c.log.Warn("an abandoned checkpoint step has a manifest; left as it is", "job", w.job.id, "dir", a.dir)
			continue
		}
		var errs []error
		for _, f := range a.files {
			if !isBaseName(f.Name) {
				errs = append(errs, fmt.Errorf("%q is not a file name", f.Name))
				continue
			}
			if err := os.Remove(filepath.Join(a.dir, f.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if err := os.Remove(a.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			c.log.Warn("removing an abandoned checkpoint step", "job", w.job.id, "dir", a.dir, "complete_step", w.step, "err", err)
			continue
		}
		c.log.Info("abandoned checkpoint step removed: a newer one is complete and some servers never wrote this one",
			"job", w.job.id, "dir", a.dir, "complete_step", w.step)
	}
}

// isBaseName reports whether name is a plain file name, without a
// directory or a way out of one.
func isBaseName(name string) bool {
	return name != "." && name != ".." && filepath.Base(name) == name
}

// writeManifest writes a step's manifest unless the node holding every
// shard already did.
func writeManifest(w manifestWork) error {
	if m, err := ckpt.ReadManifest(w.dir); err == nil && m.Step == w.step {
		return nil
	}
	if err := ps.WriteManifest(w.dir, w.job.id, w.step, len(w.files), w.files); err != nil {
		return fmt.Errorf("checkpoint of step %d: %w", w.step, err)
	}
	return nil
}

// manifestWritten records a complete checkpoint. c.mu is held.
func (c *Coordinator) manifestWritten(w manifestWork, err error, now time.Time) {
	j := w.job
	if err != nil {
		c.log.Error("checkpoint manifest not written; training goes on", "job", j.id, "step", w.step, "err", err)
		if j.ckpt.failure == nil || j.ckpt.failure.Step <= w.step {
			j.ckpt.failure = &api.CheckpointFailure{Step: w.step, Error: "manifest: " + err.Error()}
		}
		j.ckpt.failures++
		return
	}
	if j.ckpt.latest != nil && j.ckpt.latest.Step >= w.step {
		return
	}
	j.ckpt.latest = &api.CheckpointStatus{Step: w.step, Dir: w.dir, Job: j.id}
	j.askedCheckpointDone()
	c.log.Info("checkpoint complete", "job", j.id, "step", w.step, "dir", w.dir)
	c.save(j)
	c.maybeDone(j, now)
}

// awaitsFinalCheckpoint reports whether j, its stages all done, still
// waits for the checkpoint of its last step.
func (j *job) awaitsFinalCheckpoint() bool {
	if j.file.Checkpoint.Every <= 0 {
		return false
	}
	return j.ckpt.latest == nil || j.ckpt.latest.Step < j.file.TotalSteps()
}

// checkFinalCheckpoints finishes jobs that waited too long for their last
// checkpoint. c.mu is held.
func (c *Coordinator) checkFinalCheckpoints(now time.Time) {
	for _, j := range c.jobs {
		if by, why, waits := c.finalCheckpointWait(j); waits && now.After(by) {
			c.finish(j, api.JobDone, why, now)
		}
	}
}

// finalCheckpointWait reports whether j, trained, waits for the checkpoint
// of its last step, until when, and what its end will say if that
// checkpoint has not come by then. c.mu is held.
func (c *Coordinator) finalCheckpointWait(j *job) (by time.Time, why string, waits bool) {
	if j.state != api.JobRunning || j.ckpt.trained.IsZero() {
		return time.Time{}, "", false
	}
	f := j.ckpt.failure
	failing := f != nil && f.Step == j.file.TotalSteps()
	wait := c.cfg.FinalCheckpointWait
	if failing {
		wait = max(wait, c.cfg.FinalCheckpointFailWait)
	}
	since, writing := j.ckpt.trained, j.ckpt.lastWritten.After(j.ckpt.trained)
	if writing { // a large checkpoint on slow storage: wait while it gets further
		since, wait = j.ckpt.lastWritten, max(wait, c.cfg.FinalCheckpointFailWait)
	}
	why = fmt.Sprintf("trained, but not every PS shard reported the checkpoint of step %d within %s", j.file.TotalSteps(), wait)
	if writing {
		why = fmt.Sprintf("trained, but the checkpoint of step %d was still being written, %s after its writing last got further", j.file.TotalSteps(), wait)
	}
	if failing {
		why = fmt.Sprintf("trained, but the checkpoint of step %d could not be written within %s (node %s: %s)", f.Step, wait, cmp.Or(f.Node, "the coordinator"), f.Error)
	}
	return since.Add(wait), why, true
}
