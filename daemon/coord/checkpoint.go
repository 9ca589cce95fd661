package coord

import (
	"errors"
	"fmt"
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
// filesystem the coordinator and the PS nodes share.

// jobCheckpoints is what the coordinator knows of a job's checkpoints.
type jobCheckpoints struct {
	restored *api.CheckpointStatus            // where the job started from
	latest   *api.CheckpointStatus            // the latest complete one
	files    map[int64]map[int]ckpt.FileEntry // step -> shard -> file, steps not yet complete
	trained  time.Time                        // when every stage finished, while waiting for the last
}

// resolveRestore finds the checkpoint a job file's checkpoint.restore
// names: a step directory with a manifest, or a root whose latest complete
// step directory is taken. Either is verified in full.
func resolveRestore(path string) (ckpt.Checkpoint, error) {
	if _, err := ckpt.ReadManifest(path); err == nil {
		m, err := ckpt.VerifyDir(path)
		if err != nil {
			return ckpt.Checkpoint{}, err
		}
		return ckpt.Checkpoint{Dir: path, Manifest: m}, nil
	} else if !errors.Is(err, ckpt.ErrNoManifest) {
		return ckpt.Checkpoint{}, err
	}
	return ckpt.LatestComplete(path)
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
	if cp.Manifest.Step >= jf.TotalSteps() {
		return jf.Errorf("checkpoint.restore", "%s is of step %d and the job has %d steps: nothing left to train",
			cp.Dir, cp.Manifest.Step, jf.TotalSteps())
	}
	j.ckpt.restored = &api.CheckpointStatus{Step: cp.Manifest.Step, Dir: cp.Dir}
	return nil
}

// firstStep is the number of steps trained before the job started.
func (j *job) firstStep() int64 {
	if j.ckpt.restored == nil {
		return 0
	}
	return j.ckpt.restored.Step
}

// recordCheckpoints takes a PS task's reported shard files and completes
// every step all shards have reported. c.mu is held.
func (c *Coordinator) recordCheckpoints(t *taskRun, files []api.ShardCheckpoint) error {
	j := t.job
	shards := len(j.place.ps)
	for _, f := range files {
		if j.ckpt.latest != nil && f.Step <= j.ckpt.latest.Step {
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
			if err := c.completeCheckpoint(j, f.Step); err != nil {
				return err
			}
		}
	}
	return nil
}

// completeCheckpoint writes the manifest of step, whose shard files are
// all in, unless it exists, and forgets older incomplete steps.
func (c *Coordinator) completeCheckpoint(j *job, step int64) error {
	dir := ckpt.StepDir(j.file.Checkpoint.Dir, step)
	if m, err := ckpt.ReadManifest(dir); err != nil || m.Step != step {
		byShard := j.ckpt.files[step]
		files := make([]ckpt.FileEntry, len(byShard))
		for k := range files {
			files[k] = byShard[k]
		}
		if err := ps.WriteManifest(dir, j.id, step, len(files), files); err != nil {
			return fmt.Errorf("checkpoint of step %d: %w", step, err)
		}
	}
	j.ckpt.latest = &api.CheckpointStatus{Step: step, Dir: dir}
	for s := range j.ckpt.files {
		if s <= step {
			delete(j.ckpt.files, s)
		}
	}
	c.log.Info("checkpoint complete", "job", j.id, "step", step, "dir", dir)
	return nil
}

// awaitsFinalCheckpoint reports whether j, its stages all done, still
// waits for the checkpoint of its last step.
func (j *job) awaitsFinalCheckpoint() bool {
	if j.file.Checkpoint.Every <= 0 || j.file.Mode != api.ModeBSP {
		return false
	}
	return j.ckpt.latest == nil || j.ckpt.latest.Step < j.file.TotalSteps()
}

// checkFinalCheckpoints finishes jobs that waited too long for their last
// checkpoint. c.mu is held.
func (c *Coordinator) checkFinalCheckpoints(now time.Time) {
	for _, j := range c.jobs {
		wait := c.cfg.FinalCheckpointWait
		if j.state == api.JobRunning && !j.ckpt.trained.IsZero() && now.Sub(j.ckpt.trained) > wait {
			c.finish(j, api.JobDone, fmt.Sprintf("trained, but not every PS shard reported the checkpoint of step %d within %s",
				j.file.TotalSteps(), wait), now)
		}
	}
}
