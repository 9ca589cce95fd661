package coord

import (
	"context"
	"fmt"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// Automatic restarts. A job whose file asks for checkpoint.restarts and
// that fails while running (a node died, a task failed) is not failed at
// once: it becomes restarting, its tasks stop, and one heartbeat timeout
// later, when a node that died has been declared dead, the coordinator
// submits it again as a new job restored from its latest complete
// checkpoint (or from where it started, if it wrote none). The old job then
// ends failed, naming the new one; the new one is planned on the live
// nodes like any other job.

// failRunning ends a running job that failed, or sets it restarting if its
// file allows another restart. c.mu is held.
func (c *Coordinator) failRunning(j *job, reason string, now time.Time) {
	if j.restarts >= j.file.Checkpoint.Restarts {
		c.finish(j, api.JobFailed, reason, now)
		return
	}
	j.state, j.reason, j.restartAt = api.JobRestarting, reason, now.Add(c.cfg.HeartbeatTimeout)
	c.log.Warn("job restarting", "id", j.id, "reason", reason, "at", j.restartAt)
}

// restartLoop restarts jobs as they fall due, one at a time, apart from
// the reaper: checking a checkpoint may take a while.
func (c *Coordinator) restartLoop(ctx context.Context) {
	c.everyTick(ctx, func(now time.Time) {
		c.mu.Lock()
		due := c.dueRestarts(now)
		c.mu.Unlock()
		for _, j := range due {
			c.restart(j)
		}
	})
}

// dueRestarts returns the restarting jobs whose wait is over and clears
// their time, so that each is restarted once. c.mu is held.
func (c *Coordinator) dueRestarts(now time.Time) []*job {
	var due []*job
	for _, j := range c.jobs {
		if j.state == api.JobRestarting && !j.restartAt.IsZero() && !now.Before(j.restartAt) {
			j.restartAt = time.Time{}
			due = append(due, j)
		}
	}
	return due
}

// restart submits a restarting job again from its latest checkpoint. It
// runs without c.mu: checking the checkpoint reads and hashes its files.
func (c *Coordinator) restart(old *job) {
	c.mu.Lock()
	jf := *old.file
	switch {
	case old.ckpt.latest != nil:
		jf.Checkpoint.Restore = old.ckpt.latest.Dir
	case old.ckpt.restored != nil:
		jf.Checkpoint.Restore = old.ckpt.restored.Dir
	}
	j := &job{file: &jf, state: api.JobPending, submitted: time.Now(), restarts: old.restarts + 1, restartOf: old.id}
	c.mu.Unlock()

	err := c.check(j)

	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if old.state != api.JobRestarting { // cancelled meanwhile
		return
	}
	if err == nil {
		err = c.enqueue(j)
	}
	if err != nil {
		c.finish(old, api.JobFailed, fmt.Sprintf("%s; restarting it failed: %v", old.reason, err), now)
		return
	}
	old.restartedAs = j.id
	from := "the start"
	if j.ckpt.restored != nil {
		from = fmt.Sprintf("step %d", j.ckpt.restored.Step)
	}
	c.finish(old, api.JobFailed, fmt.Sprintf("%s; restarted from %s as job %s", old.reason, from, j.id), now)
}
