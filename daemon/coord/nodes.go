package coord

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// node is a registered node daemon.
type node struct {
	id         string
	req        api.RegisterRequest
	kind       string // its type's kind in the catalog: cpu or gpu
	state      api.NodeState
	reason     string // why it is dead
	registered time.Time
	lastSeen   time.Time
}

func (n *node) alive() bool { return n.state == api.NodeAlive }

// psAddr is where the node serves parameter-server shards.
func (n *node) psAddr() string {
	if n.req.PSAddr != "" {
		return n.req.PSAddr
	}
	return n.req.DataAddr
}

// describe names a node for messages: "node gpu-3 (10.0.0.3:7070)".
func (n *node) describe() string { return fmt.Sprintf("node %s (%s)", n.req.Name, n.req.DataAddr) }

// register adds a node. A node registering under a name that is alive
// replaces it: the daemon restarted, so its tasks are gone.
func (c *Coordinator) register(req api.RegisterRequest) (api.RegisterResponse, error) {
	if err := req.Validate(); err != nil {
		return api.RegisterResponse{}, badRequest("register: %v", err)
	}
	typ, ok := c.cfg.Catalog.Type(req.Type)
	if !ok {
		return api.RegisterResponse{}, badRequest("register: type %q is not in the catalog (have %s)", req.Type, c.typeNames())
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastNode++
	n := &node{id: fmt.Sprintf("n%d", c.lastNode), req: req, kind: typ.Kind, state: api.NodeAlive, registered: now, lastSeen: now}
	for _, old := range c.nodes {
		if old.alive() && old.req.Name == req.Name {
			c.declareDead(old, fmt.Sprintf("%s registered again as %s (the daemon restarted)", old.describe(), n.id))
		}
	}
	c.nodes = append(c.nodes, n)
	c.log.Info("node registered", "id", n.id, "name", req.Name, "addr", req.DataAddr, "type", req.Type, "units", req.Units)
	return api.RegisterResponse{NodeID: n.id, HeartbeatIntervalMS: c.cfg.HeartbeatInterval.Milliseconds()}, nil
}

func (c *Coordinator) typeNames() string {
	names := make([]string, len(c.cfg.Catalog.Types))
	for i, t := range c.cfg.Catalog.Types {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// heartbeat records a node's reports and returns the tasks it should run.
func (c *Coordinator) heartbeat(id string, hb api.Heartbeat) (api.HeartbeatResponse, error) {
	if err := hb.Validate(); err != nil {
		return api.HeartbeatResponse{}, badRequest("heartbeat: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(id)
	switch {
	case n == nil:
		return api.HeartbeatResponse{}, httpErrorf(http.StatusNotFound, "no node %q: register first", id)
	case !n.alive():
		return api.HeartbeatResponse{}, httpErrorf(http.StatusGone, "node %s is dead (%s): register again", id, n.reason)
	}
	now := time.Now()
	n.lastSeen = now
	for _, r := range hb.Tasks {
		c.applyReport(n, r, now)
	}
	return api.HeartbeatResponse{Tasks: c.tasksOf(n)}, nil
}

func (c *Coordinator) node(id string) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// reapLoop declares nodes dead when their heartbeats stop.
func (c *Coordinator) reapLoop(ctx context.Context) { c.everyTick(ctx, c.reap) }

// everyTick calls f eight times per heartbeat timeout until ctx ends.
func (c *Coordinator) everyTick(ctx context.Context, f func(now time.Time)) {
	tick := time.NewTicker(max(c.cfg.HeartbeatTimeout/8, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			f(now)
		}
	}
}

func (c *Coordinator) reap(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.alive() && now.Sub(n.lastSeen) > c.cfg.HeartbeatTimeout {
			c.declareDead(n, fmt.Sprintf("%s missed heartbeats for %s", n.describe(), c.cfg.HeartbeatTimeout))
		}
	}
	c.checkFinalCheckpoints(now)
}

// declareDead marks n dead and fails every running job with a task on it.
// c.mu is held.
func (c *Coordinator) declareDead(n *node, reason string) {
	n.state, n.reason = api.NodeDead, reason
	c.log.Warn("node dead", "id", n.id, "reason", reason)
	for _, j := range c.jobs {
		if j.state == api.JobRunning && slices.ContainsFunc(j.tasks, func(t *taskRun) bool { return t.node == n }) {
			c.failRunning(j, reason, time.Now())
		}
	}
}

// nodeStatuses lists every node, dead ones included. c.mu is held.
func (c *Coordinator) nodeStatuses() []api.NodeStatus {
	out := make([]api.NodeStatus, 0, len(c.nodes))
	for _, n := range c.nodes {
		tasks := []string{}
		for _, t := range c.tasksOf(n) {
			tasks = append(tasks, t.TaskID)
		}
		gpus := n.req.GPUs
		if gpus == nil {
			gpus = []api.GPU{}
		}
		out = append(out, api.NodeStatus{ID: n.id, Name: n.req.Name, DataAddr: n.req.DataAddr, PSAddr: n.req.PSAddr, Type: n.req.Type,
			Units: n.req.Units, Cores: n.req.Cores, MemoryBytes: n.req.MemoryBytes, GPUs: gpus, State: n.state,
			Reason: n.reason, Registered: n.registered, LastHeartbeat: n.lastSeen, Tasks: tasks})
	}
	return out
}
