package coord

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// Draining takes a node out of service without failing its jobs, for
// maintenance: nothing new is placed on it (cluster leaves it out of
// planning, placement, restarts, re-plans and moves back up), a running
// single-stage job that syncs through the parameter servers and has
// replicas elsewhere drops its replicas on it at once, in place (shrink,
// as when a node dies; it moves back up from a checkpoint if that leaves
// it below its throughput_limit), and every other job on it — its
// parameter-server shard there, an allreduce stage, a pipeline, its last
// replica — moves off it at its next complete checkpoint: when the free
// live nodes that are not draining can host it at any throughput, it
// restarts from that checkpoint onto them (planned at its limit, or below
// it as any restart is), as a move: no restart spent, no backoff. A job
// that writes no checkpoint, or finds no room elsewhere, runs to its end
// where it is. The node is drained once it hosts no task. The mark is
// kept by node name, in the state database, across the node's and the
// coordinator's restarts, until the node is put back.

// drain marks the node idOrName (an id, or the name of a registered node,
// live or dead) draining or puts it back, and returns its status once the
// mark is stored.
func (c *Coordinator) drain(ctx context.Context, idOrName string, on bool) (api.NodeStatus, error) {
	c.mu.Lock()
	n := c.node(idOrName)
	if n == nil {
		n = c.latestNamed(idOrName)
	}
	if n == nil {
		c.mu.Unlock()
		return api.NodeStatus{}, httpErrorf(http.StatusNotFound, "drain: no node %q", idOrName)
	}
	name := n.req.Name
	if on != c.drained[name] {
		c.setDrained(name, on)
	}
	saved := c.saveDrained()
	status := c.nodeStatusOf(n)
	c.mu.Unlock()
	if err := saved(ctx); err != nil {
		return api.NodeStatus{}, fmt.Errorf("drain %s: storing the mark: %w", name, err)
	}
	return status, nil
}

// setDrained marks the node named name draining or puts it back; a
// draining node's jobs that can leave it do. c.mu is held.
func (c *Coordinator) setDrained(name string, on bool) {
	if !on {
		delete(c.drained, name)
		c.log.Info("node back in service", "node", name)
		c.wake()
		return
	}
	c.drained[name] = true
	c.log.Info("node draining", "node", name)
	now := time.Now()
	for _, n := range c.nodes {
		if n.req.Name != name || !n.alive() {
			continue
		}
		for _, j := range c.jobs {
			if j.state == api.JobRunning && j.hasTaskOn(n) {
				c.shrink(j, n, now, causeDraining)
			}
		}
	}
}

// latestNamed is the node last registered under name, live or dead.
// c.mu is held.
func (c *Coordinator) latestNamed(name string) *node {
	for _, n := range slices.Backward(c.nodes) {
		if n.req.Name == name {
			return n
		}
	}
	return nil
}

// drainingNote is what a queued job's reason adds when live nodes it may
// not use are draining: "; draining: a, b". c.mu is held.
func (c *Coordinator) drainingNote() string {
	var names []string
	for _, n := range c.nodes {
		if n.alive() && c.draining(n) {
			names = append(names, n.req.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "; draining: " + strings.Join(names, ", ")
}

// draining reports whether n is out of service. c.mu is held.
func (c *Coordinator) draining(n *node) bool { return c.drained[n.req.Name] }

// saveDrained stores the drained nodes' names and returns what waits for
// the commit. c.mu is held.
func (c *Coordinator) saveDrained() func(context.Context) error {
	if c.store == nil {
		return func(context.Context) error { return nil }
	}
	return commitOf(c.store.PutDrained(slices.Sorted(maps.Keys(c.drained))))
}

// commitOf is what waits for a store write's commit, or for its context.
func commitOf(done <-chan error) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drainMove is what deciding a move off a draining node needs, copied out
// under c.mu.
type drainMove struct {
	j    *job
	gen  int64
	snap *job // planningCopy
	cat  *config.Catalog
	node string // the draining node it would leave
	from int64  // the checkpoint the move restores
}

// drainMovesDue returns the running jobs on a draining node with a
// complete checkpoint not yet evaluated for a move. c.mu is held.
func (c *Coordinator) drainMovesDue() []drainMove {
	var due []drainMove
	for _, j := range c.jobs {
		cp := j.ckpt.latest
		if j.state != api.JobRunning || cp == nil || cp.Step <= j.drainChecked {
			continue
		}
		node := c.drainingNodeOf(j)
		if node == "" {
			continue
		}
		j.drainChecked = cp.Step
		if atStep(j, cp.Step) >= j.file.TotalSteps() {
			continue // trained: it ends where it is
		}
		due = append(due, drainMove{j: j, gen: j.gen, snap: j.planningCopy(), node: node, from: cp.Step,
			cat: c.replanCatalog(j)})
	}
	return due
}

// drainingNodeOf is the name of a live draining node that hosts a task of
// j, or "". c.mu is held.
func (c *Coordinator) drainingNodeOf(j *job) string {
	for _, t := range j.tasks {
		if t.node != nil && t.node.alive() && c.draining(t.node) {
			return t.node.req.Name
		}
	}
	return ""
}

// drainTick moves the jobs on draining nodes that can leave them at a new
// checkpoint, planning without c.mu.
func (c *Coordinator) drainTick(ctx context.Context) {
	if c.allocPolicy() != "" {
		return // the allocator owns the units
	}
	c.mu.Lock()
	due := c.drainMovesDue()
	c.mu.Unlock()
	for _, m := range due {
		jf := *c.planFile(m.snap)
		jf.ThroughputLimit = anyThroughput
		plan, err := c.planWithin(ctx, m.snap, &jf, "exact", m.cat)
		c.mu.Lock()
		c.applyDrainMove(m, plan, err, time.Now())
		c.mu.Unlock()
	}
}

// applyDrainMove restarts the job from its checkpoint as a move when the
// nodes that are not draining can host plan, unless the job changed
// meanwhile. c.mu is held.
func (c *Coordinator) applyDrainMove(m drainMove, plan *sched.Plan, err error, now time.Time) {
	j := m.j
	switch {
	case err != nil:
		c.log.Warn("planning a move off a draining node", "job", j.id, "node", m.node, "err", err)
		return
	case j.state != api.JobRunning || j.gen != m.gen:
		return
	case !plan.Feasible:
		c.log.Info("not moving off a draining node: no room on the others", "job", j.id, "node", m.node, "reason", plan.Reason)
		return
	}
	if _, err := place(plan, j.file.Batch, c.cluster(j, true), c.plainDataPlane()); err != nil {
		c.log.Info("not moving off a draining node: the others cannot host it", "job", j.id, "node", m.node, "err", err)
		return
	}
	c.log.Info("job moves off a draining node", "job", j.id, "node", m.node, "from_step", m.from)
	c.startMove(j, fmt.Sprintf("moving off draining node %s from its newest checkpoint", m.node), now)
}
