package coord

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// Draining takes a node out of service without failing its jobs, for
// maintenance: nothing new is placed on it (cluster leaves it out of
// planning, placement, restarts, re-plans and moves back up), a running
// single-stage job that syncs through the parameter servers and has
// replicas elsewhere drops its replicas on it at once, in place (shrink,
// as when a node dies; it moves back up from a checkpoint if that leaves
// it below its throughput_limit), and every other job on it runs to its
// end there. The node is drained once it hosts no task. The mark is kept
// by node name, in the state database, across the node's and the
// coordinator's restarts, until the node is put back.

// drain marks the node idOrName (an id, or the name of a registered node,
// live or dead) draining or puts it back, and returns its status once the
// mark is stored.
func (c *Coordinator) drain(ctx context.Context, idOrName string, on bool) (api.NodeStatus, error) {
	c.mu.Lock()
	n := c.nodeByIDOrName(idOrName)
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
	names := slices.Sorted(maps.Keys(c.drained))
	done := c.store.PutDrained(names)
	return func(ctx context.Context) error {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
