package coord

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// Persistence. Every change of a job's durable state (submission,
// placement, a complete checkpoint, a restart, the end) hands its record
// to the store, whose goroutine commits it off the request path; nothing
// under c.mu waits for the disk. A submission alone waits for its commit,
// after c.mu is released, before it is answered.

// save hands j's record to the store and returns a function that waits for
// the commit. c.mu is held.
func (c *Coordinator) save(j *job) func() error {
	if c.store == nil {
		return func() error { return nil }
	}
	done := c.store.PutJob(j.record())
	counters := c.store.PutCounters(store.Counters{LastJob: c.lastJob, LastNode: c.lastNode})
	return func() error {
		if err := <-done; err != nil {
			return err
		}
		return <-counters
	}
}

// checkStore logs the state commits that failed since it last looked (a
// full disk), at most once a storeLogEvery while they go on failing:
// until one succeeds again, a restart of the coordinator would come back
// without the changes since. c.mu is held.
func (c *Coordinator) checkStore(now time.Time) {
	if c.store == nil {
		return
	}
	failures, err := c.store.Health()
	switch {
	case err == nil && !c.storeLogged.IsZero():
		c.log.Info("state database: recording changes again", "path", c.store.Path(), "failed_commits", failures)
		c.storeLogged = time.Time{}
	case err != nil && failures > c.storeFailures && now.Sub(c.storeLogged) >= storeLogEvery:
		c.log.Error("state database: changes not recorded (retried every 30 s at most); a restart of the coordinator now would lose them (free its disk)",
			"failed_commits", failures, "path", c.store.Path(), "err", err)
		c.storeLogged = now
	}
	c.storeFailures = failures
}

// storeLogEvery spaces the log lines of a state database that keeps
// failing.
const storeLogEvery = time.Minute

// saveCounters records the id counters. c.mu is held.
func (c *Coordinator) saveCounters() {
	if c.store != nil {
		c.store.PutCounters(store.Counters{LastJob: c.lastJob, LastNode: c.lastNode})
	}
}

// record is j's durable record. c.mu is held.
func (j *job) record() store.Job {
	r := store.Job{ID: j.id, Seq: j.seq, Source: j.source, Restore: j.file.Checkpoint.Restore, Model: j.modelText,
		State: j.state, Reason: j.reason, Plan: j.planJSON, Generation: j.gen, Hourly: j.hourly,
		Restored: j.ckpt.restored, Latest: j.ckpt.latest, Restarts: j.restarts, RestartOf: j.restartOf,
		RestartedAs: j.restartedAs, Suspects: slices.Clone(j.suspects), FailedAt: j.failedAt, NotBefore: j.notBefore, Move: j.moving,
		IdempotencyKey: j.idemKey, Submitted: j.submitted, Started: j.started, Finished: j.finished, Batching: j.batchingRecord(), Replan: j.replan.record(),
		Progress: j.progressRecord()}
	for _, t := range j.tasks {
		r.Tasks = append(r.Tasks, store.Task{Spec: t.task, Node: t.nodeName, NodeID: t.registration(), Last: lastReport(j, t)})
	}
	return r
}

// lastReport is what a final job's record keeps of t's last report: its
// progress, without the checkpoint files (the job's record has its
// checkpoint). nil while the job has not ended: its nodes report again.
func lastReport(j *job, t *taskRun) *api.TaskReport {
	if !j.state.Final() || t.report.TaskID == "" {
		return nil
	}
	r := t.report
	r.Checkpoints = nil
	return &r
}

// load takes up the state database's jobs: waiting jobs queue again,
// running jobs wait for their nodes to register and report their tasks
// (AdoptionTimeout), a restarting job is restarted as due.
func (c *Coordinator) load() error {
	st, err := c.store.Load()
	if err != nil {
		return err
	}
	c.lastJob, c.lastNode = st.Counters.LastJob, st.Counters.LastNode
	now := time.Now()
	for _, r := range st.Jobs {
		j, err := jobFromRecord(r)
		if err != nil {
			return fmt.Errorf("state: job %s: %w", r.ID, err)
		}
		switch j.state {
		case api.JobPlanning:
			j.state = api.JobPending
		case api.JobRunning:
			j.adoptBy = now.Add(c.cfg.AdoptionTimeout)
		case api.JobRestarting:
			if j.restartedAs == "" && j.failedAt.IsZero() {
				j.failedAt = now // the restart was under way: do it again
			}
		}
		c.jobs = append(c.jobs, j)
		if r.IdempotencyKey != "" {
			c.idem[r.IdempotencyKey] = j.id
		}
	}
	c.loadProfiles(st.Profiles)
	for _, name := range st.Drained {
		c.drained[name] = true
	}
	maps.Copy(c.throttles, st.Throttles)
	c.log.Info("state loaded", "dir", c.cfg.StateDir, "jobs", len(c.jobs), "last_job", c.lastJob, "profiles", len(st.Profiles))
	return nil
}

// jobFromRecord rebuilds a job from its record.
func jobFromRecord(r store.Job) (*job, error) {
	jf, err := config.ParseJob(jobFileName, []byte(r.Source))
	if err != nil {
		return nil, err
	}
	jf.Checkpoint.Restore = r.Restore
	j := &job{id: r.ID, seq: r.Seq, source: r.Source, file: jf, modelText: r.Model, state: r.State, reason: r.Reason,
		planJSON: r.Plan, gen: r.Generation, hourly: r.Hourly, restarts: r.Restarts, restartOf: r.RestartOf,
		restartedAs: r.RestartedAs, suspects: r.Suspects, failedAt: r.FailedAt, notBefore: r.NotBefore, moving: r.Move,
		idemKey: r.IdempotencyKey, submitted: r.Submitted, started: r.Started, finished: r.Finished, verified: true}
	j.ckpt.restored, j.ckpt.latest = r.Restored, r.Latest
	if r.Model != "" {
		if j.model, err = config.ParseModel("job "+r.ID+" model", []byte(r.Model)); err != nil {
			return nil, err
		}
	}
	if len(r.Plan) > 0 {
		j.plan = &sched.Plan{}
		if err := json.Unmarshal(r.Plan, j.plan); err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
	}
	if err := j.takeBatching(r.Batching); err != nil {
		return nil, fmt.Errorf("batching: %w", err)
	}
	if j.replan, err = replanFromRecord(r.Replan); err != nil {
		return nil, fmt.Errorf("replan: %w", err)
	}
	if err := checkProgress(r.Progress); err != nil {
		return nil, fmt.Errorf("progress: %w", err)
	}
	j.heldProgress = r.Progress
	for _, t := range r.Tasks {
		tr := &taskRun{job: j, task: t.Spec, nodeName: t.Node, loadedOn: t.NodeID}
		if t.Last != nil && j.state.Final() {
			tr.report = *t.Last
		}
		j.tasks = append(j.tasks, tr)
	}
	return j, nil
}

// prune forgets the oldest final jobs beyond KeepFinished, except those
// a job that is not final restarts (transitively). c.mu is held.
func (c *Coordinator) prune(now time.Time) {
	final := 0
	for _, j := range c.jobs {
		if j.state.Final() {
			final++
		}
	}
	if final <= c.cfg.KeepFinished {
		return
	}
	needed := map[string]bool{}
	for _, j := range c.jobs {
		if !j.state.Final() {
			for id := range c.chain(j) {
				needed[id] = true
			}
		}
	}
	for _, j := range c.jobs {
		if j.state.Final() && needed[j.id] {
			final--
		}
	}
	kept := c.jobs[:0]
	for _, j := range c.jobs {
		if final > c.cfg.KeepFinished && j.state.Final() && !needed[j.id] {
			final--
			c.forget(j)
			continue
		}
		kept = append(kept, j)
	}
	clear(c.jobs[len(kept):])
	c.jobs = kept
}

// forget drops j's record, and its idempotency key with it. c.mu is held.
func (c *Coordinator) forget(j *job) {
	if j.idemKey != "" {
		delete(c.idem, j.idemKey)
	}
	if c.store != nil {
		c.store.DeleteJob(j.id)
	}
}

// pruneNodes forgets nodes dead for longer than DeadNodeRetention. c.mu
// is held.
func (c *Coordinator) pruneNodes(now time.Time) {
	c.nodes = slices.DeleteFunc(c.nodes, func(n *node) bool {
		return !n.alive() && now.Sub(n.died) > c.cfg.DeadNodeRetention
	})
}
