package coord

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/store"
)

// Automatic restarts. A job whose file asks for checkpoint.restarts and
// that fails while running (a node died, a task failed) is not failed at
// once: it becomes restarting and its tasks stop. A task's failure often
// comes first, from a partner losing its connection to a node that has just
// died, before that node misses its heartbeats; so the restart waits until
// every node of the job has either heartbeated since the failure or been
// declared dead, and until the backoff has passed (RestartBackoff, doubled
// per restart, at most MaxRestartBackoff) and the lease of every node that
// died has run out (so that its tasks have stopped: they can no longer
// write). Then the coordinator submits the job again as a new job restored
// from the newest complete checkpoint of its restart chain that verifies
// (or from where it started), queued in its original's place and avoiding
// the nodes that failed it for SuspectFor; the old job ends failed, naming
// the new one. A task that fails with a deterministic error (bad input
// data, a model its data cannot feed, memory it cannot have at start-up)
// fails the job without a restart.

// lostNode is a node whose failure failed a job; dead says it was
// declared dead rather than reporting a failed task.
type lostNode struct {
	name string
	dead bool
}

// taskFailed handles a node's report that a task failed. c.mu is held.
func (c *Coordinator) taskFailed(j *job, n *node, r api.TaskReport, now time.Time) {
	reason := fmt.Sprintf("task %s on %s failed: %s", r.TaskID, n.describe(), r.Error)
	if r.Permanent {
		c.finish(j, api.JobFailed, reason+" (a deterministic error: not restarted)", now)
		return
	}
	c.failRunning(j, reason, now, lostNode{name: n.req.Name})
}

// failRunning ends a running job that failed, or sets it restarting if its
// file allows another restart. c.mu is held.
func (c *Coordinator) failRunning(j *job, reason string, now time.Time, lost lostNode) {
	if j.restarts >= j.file.Checkpoint.Restarts {
		c.finish(j, api.JobFailed, reason, now)
		return
	}
	backoff := min(c.cfg.RestartBackoff<<min(j.restarts, 20), c.cfg.MaxRestartBackoff)
	j.state, j.reason, j.failedAt, j.notBefore = api.JobRestarting, reason, now, now.Add(backoff)
	j.addLost(lost)
	c.log.Warn("job restarting", "job", j.id, "reason", reason, "backoff", backoff)
	c.save(j)
}

func (j *job) addLost(l lostNode) {
	for i, o := range j.lost {
		if o.name == l.name {
			j.lost[i].dead = o.dead || l.dead
			return
		}
	}
	j.lost = append(j.lost, l)
}

// restartLoop restarts jobs as they fall due, one at a time, apart from
// the reaper: finding and verifying a checkpoint may take a while.
func (c *Coordinator) restartLoop(ctx context.Context) {
	c.everyTick(ctx, func(now time.Time) {
		c.mu.Lock()
		due := c.dueRestarts(now)
		c.mu.Unlock()
		for _, j := range due {
			c.restart(j)
		}
		c.replanTick(ctx, now)
		c.raiseTick(ctx, now)
		c.drainTick(ctx)
	})
}

// dueRestarts returns the restarting jobs whose nodes have all settled and
// whose backoff has passed, and clears their failure time, so that each is
// restarted once. c.mu is held.
func (c *Coordinator) dueRestarts(now time.Time) []*job {
	var due []*job
	for _, j := range c.jobs {
		if j.state == api.JobRestarting && !j.failedAt.IsZero() && !now.Before(j.notBefore) && settled(j) {
			j.failedAt = time.Time{}
			due = append(due, j)
		}
	}
	return due
}

// settled reports whether every node of j has heartbeated since j failed
// or has been declared dead (or never came back after a restart of the
// coordinator).
func settled(j *job) bool {
	for _, t := range j.tasks {
		if t.node != nil && t.node.alive() && !t.node.lastSeen.After(j.failedAt) {
			return false
		}
	}
	return true
}

// restart submits a restarting job again from the newest checkpoint of its
// chain. It runs without c.mu while it reads and verifies checkpoints.
func (c *Coordinator) restart(old *job) {
	c.mu.Lock()
	jf := *old.file
	known := old.ckpt.latest
	if known == nil {
		known = old.ckpt.restored
	}
	chain, restored := c.chainJobs(old) // the restored manifests are read below, unlocked
	now := time.Now()
	j := &job{source: old.source, file: &jf, state: api.JobPending, submitted: now, restarts: old.restarts + 1,
		restartOf: old.id, seq: old.seq, suspects: old.nextSuspects(now, c.cfg.SuspectFor), carry: old.carry}
	if old.moving { // not a failure: replan.go, raise.go, batchrestart.go
		j.restarts = old.restarts
	}
	if old.resizeTo != nil {
		j.carry = old.resizeTo
	}
	j.replan = old.replan.handOn(old, now)
	c.mu.Unlock()

	addRestoredJobs(chain, restored)
	cp, err := newestVerified(jf.Checkpoint.Dir, chain, known, jf.TotalSteps())
	if err == nil {
		jf.Checkpoint.Restore = ""
		if cp != nil {
			jf.Checkpoint.Restore = cp.Dir
		}
		err = c.check(j)
		j.verified = true
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	now = time.Now()
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
	c.save(j)
	old.restartedAs = j.id
	replanRestarted(old, j)
	from := "the start"
	if j.ckpt.restored != nil {
		from = fmt.Sprintf("step %d", j.ckpt.restored.Step)
	}
	c.finish(old, api.JobFailed, fmt.Sprintf("%s; restarted from %s as job %s", old.reason, from, j.id), now)
}

// chain is the ids of j and of the jobs it restarts, transitively, and of
// the job the chain started from (its restored checkpoint's manifest says
// which). c.mu is held.
func (c *Coordinator) chain(j *job) map[string]bool {
	ids, restored := c.chainJobs(j)
	addRestoredJobs(ids, restored)
	return ids
}

// chainJobs is chain without reading anything: the ids of j and the jobs
// it restarts, with the writers of the checkpoints they restored, and the
// directories of restored checkpoints whose writer a record from before
// CheckpointStatus.Job does not name, to read. c.mu is held.
func (c *Coordinator) chainJobs(j *job) (ids map[string]bool, restored []string) {
	ids = map[string]bool{}
	for o := j; o != nil && !ids[o.id]; o = c.job(o.restartOf) {
		ids[o.id] = true
		switch r := o.ckpt.restored; {
		case r != nil && r.Job != "":
			ids[r.Job] = true
		case r != nil:
			restored = append(restored, r.Dir)
		}
	}
	return ids, restored
}

// addRestoredJobs adds to ids the jobs that wrote the checkpoints in dirs.
func addRestoredJobs(ids map[string]bool, dirs []string) {
	for _, dir := range dirs {
		if m, err := ckpt.ReadManifest(dir); err == nil {
			ids[m.JobID] = true
		}
	}
}

// nextSuspects is the suspects a restart of j avoids: its unexpired ones
// and the nodes that failed it now — those declared dead if any was, else
// the node whose task failed.
func (j *job) nextSuspects(now time.Time, d time.Duration) []store.Suspect {
	var out []store.Suspect
	for _, s := range j.suspects {
		if now.Before(s.Until) {
			out = append(out, s)
		}
	}
	dead := slices.ContainsFunc(j.lost, func(l lostNode) bool { return l.dead })
	for _, l := range j.lost {
		if l.dead || !dead {
			out = append(out, store.Suspect{Node: l.name, Until: now.Add(d)})
		}
	}
	return out
}

// newestVerified finds the newest complete checkpoint under root written
// by a job of chain, with steps left to train, that verifies in full,
// falling back to older ones and last to known (the newest the coordinator
// completed itself). nil means none: start from the beginning.
func newestVerified(root string, chain map[string]bool, known *api.CheckpointStatus, steps int64) (*api.CheckpointStatus, error) {
	cands, _ := chainCheckpoints(root, chain, steps) // an unreadable root leaves the known one
	if known != nil && !slices.ContainsFunc(cands, func(c api.CheckpointStatus) bool { return c.Dir == known.Dir }) {
		cands = append(cands, *known)
		slices.SortFunc(cands, func(a, b api.CheckpointStatus) int { return cmp.Compare(b.Step, a.Step) })
	}
	var firstErr error
	for _, cand := range cands {
		_, err := ckpt.VerifyDir(cand.Dir)
		if err == nil {
			return &cand, nil
		}
		firstErr = cmp.Or(firstErr, err)
	}
	if firstErr != nil {
		return nil, fmt.Errorf("no checkpoint of the job verifies: %w", firstErr)
	}
	return nil, nil
}

// chainCheckpoints lists the step directories under root whose manifest
// names a job of chain (any, if chain is nil) and a step before steps (if
// steps > 0), newest first.
func chainCheckpoints(root string, chain map[string]bool, steps int64) ([]api.CheckpointStatus, error) {
	if root == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	var out []api.CheckpointStatus
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		m, err := ckpt.ReadManifest(dir)
		if err != nil || (chain != nil && !chain[m.JobID]) || (steps > 0 && m.Step >= steps) || dir != ckpt.StepDir(root, m.Step) {
			continue
		}
		out = append(out, api.CheckpointStatus{Step: m.Step, Dir: dir, Job: m.JobID})
	}
	slices.SortFunc(out, func(a, b api.CheckpointStatus) int { return cmp.Compare(b.Step, a.Step) })
	return out, nil
}
