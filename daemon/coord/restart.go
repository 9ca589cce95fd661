package coord

import (
	"context"
	"fmt"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// Automatic restarts. A job whose file asks for checkpoint.restarts and
// that fails while running (a node died, a task failed) is not failed at
// once: it becomes restarting and its tasks stop. A task's failure often
// comes first, from a partner losing its connection to a node that has just
// died, before that node misses its heartbeats; so the restart waits until
// every node of the job has either heartbeated since the failure or been
// declared dead. Then the coordinator submits the job again as a new job
// restored from its latest complete checkpoint (or from where it started,
// if it wrote none), planned on the live nodes like any other job; the old
// job ends failed, naming the new one.

// failRunning ends a running job that failed, or sets it restarting if its
// file allows another restart. c.mu is held.
func (c *Coordinator) failRunning(j *job, reason string, now time.Time) {
	if j.restarts >= j.file.Checkpoint.Restarts {
		c.finish(j, api.JobFailed, reason, now)
		return
	}
	j.state, j.reason, j.failedAt = api.JobRestarting, reason, now
	c.log.Warn("job restarting", "id", j.id, "reason", reason)
}

// restartLoop restarts jobs as they fall due, one at a time, apart from
// the reaper: checking a checkpoint may take a while.
func (c *Coordinator) restartLoop(ctx context.Context) {
	c.everyTick(ctx, func(time.Time) {
		c.mu.Lock()
		due := c.dueRestarts()
		c.mu.Unlock()
		for _, j := range due {
			c.restart(j)
		}
	})
}

// dueRestarts returns the restarting jobs whose nodes have all settled
// and clears their failure time, so that each is restarted once. c.mu is
// held.
func (c *Coordinator) dueRestarts() []*job {
	var due []*job
	for _, j := range c.jobs {
		if j.state == api.JobRestarting && !j.failedAt.IsZero() && settled(j) {
			j.failedAt = time.Time{}
			due = append(due, j)
		}
	}
	return due
}

// settled reports whether every node of j has heartbeated since j failed
// or has been declared dead.
func settled(j *job) bool {
	for _, t := range j.tasks {
		if t.node.alive() && !t.node.lastSeen.After(j.failedAt) {
			return false
		}
	}
	return true
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
