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
	died       time.Time
	left       bool // it said it was shutting down: its tasks have stopped
	cpu        cpuShare
}

func (n *node) alive() bool { return n.state == api.NodeAlive }

// stageUnits is what n offers one stage task: its units, or one GPU for a
// node that names its GPUs, since a stage task runs on one GPU (a node's
// other GPUs serve other jobs' stage tasks when the allocator shares
// nodes; a stage of k GPUs is k replicas on k nodes, one heterpsd per GPU).
func (n *node) stageUnits() int {
	if len(n.req.GPUDevices) > 0 {
		return 1
	}
	return n.req.Units
}

// lease is how long the node keeps its tasks running without reaching the
// coordinator.
func (n *node) lease() time.Duration { return n.req.Lease() }

// psAddr is where the node serves parameter-server shards.
func (n *node) psAddr() string {
	if n.req.PSAddr != "" {
		return n.req.PSAddr
	}
	return n.req.DataAddr
}

// describe names a node for messages: "node gpu-3 (10.0.0.3:7070)".
func (n *node) describe() string { return fmt.Sprintf("node %s (%s)", n.req.Name, n.req.DataAddr) }

// register adds a node. The tasks it reports running are adopted: tasks of
// running jobs placed on a node of its name (the coordinator restarted, or
// the node lost touch for less than its timeout) stay where they are. A
// node registering under the name and address of a live entry is that
// daemon restarted and replaces it; the tasks the old entry held and the
// new one does not report are lost, which fails their jobs. Under the name
// of a live node at another address it is another daemon, refused with 409
// (otherwise the two would evict each other at every heartbeat).
//
// A node's id is its name, '~' and the registration's number ("gpu-1~3"):
// the number tells a restarted daemon's entries apart, and the name
// leads so that an id never reads as another node's name.
func (c *Coordinator) register(req api.RegisterRequest) (api.RegisterResponse, error) {
	if err := req.Validate(); err != nil {
		return api.RegisterResponse{}, badRequest("register: %v", err)
	}
	typ, ok := c.cfg.Catalog.Type(req.Type)
	if !ok {
		return api.RegisterResponse{}, badRequest("register: type %q is not in the catalog (have %s)", req.Type, c.typeNames())
	}
	if err := checkNodeGPUs(req, typ, c.cfg.Catalog.EmulateGPUs); err != nil {
		return api.RegisterResponse{}, badRequest("register: %v", err)
	}
	if err := c.checkLease(req); err != nil {
		return api.RegisterResponse{}, badRequest("register: %v", err)
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if other := c.liveNamesake(req, now); other != nil {
		return api.RegisterResponse{}, httpErrorf(http.StatusConflict,
			"register: the name %s is taken by the live node %s at %s (registered %s); give this node (%s) another name",
			req.Name, other.id, other.req.DataAddr, other.registered.Format(time.RFC3339), req.DataAddr)
	}
	if err := c.checkGPUsUnclaimed(req); err != nil {
		return api.RegisterResponse{}, httpErrorf(http.StatusConflict, "register: %v", err)
	}
	c.lastNode++
	n := &node{id: nodeID(req.Name, c.lastNode), req: req, kind: typ.Kind, state: api.NodeAlive, registered: now, lastSeen: now}
	adopted := c.adopt(n, req.Tasks, now)
	for _, old := range c.nodes {
		if old.alive() && old.req.Name == req.Name {
			c.declareDead(old, fmt.Sprintf("%s registered again as %s (the daemon restarted, or its lease ran out)", old.describe(), n.id), now)
		}
	}
	c.nodes = append(c.nodes, n)
	c.saveCounters()
	c.wake()
	c.log.Info("node registered", "node", req.Name, "node_id", n.id, "addr", req.DataAddr, "type", req.Type, "units", req.Units, "adopted", adopted)
	if n.stageUnits() < req.Units {
		c.log.Warn("a stage task runs on one GPU: this node gives a job's stage one of its GPUs; run one heterpsd per GPU to train a stage on several",
			"node", req.Name, "gpus", req.GPUDevices)
	}
	for _, r := range req.Tasks {
		c.applyReport(n, r, now)
	}
	return api.RegisterResponse{NodeID: n.id, HeartbeatIntervalMS: c.cfg.HeartbeatInterval.Milliseconds()}, nil
}

// nodeID is the id of a node's registration number seq under name.
func nodeID(name string, seq uint64) string { return fmt.Sprintf("%s~%d", name, seq) }

// liveNamesake returns a live node of req's name at another address that
// has heartbeated within the timeout, or nil. c.mu is held.
func (c *Coordinator) liveNamesake(req api.RegisterRequest, now time.Time) *node {
	for _, old := range c.nodes {
		if old.alive() && old.req.Name == req.Name && old.req.DataAddr != req.DataAddr &&
			now.Sub(old.lastSeen) <= c.cfg.HeartbeatTimeout {
			return old
		}
	}
	return nil
}

// adopt binds to n the tasks of running jobs placed on a node of n's name
// that n reports, and those it never got: bound to the registration n
// says it held before (api.RegisterRequest.Previous), they are handed over
// at its next heartbeat. It fails the jobs whose other tasks there n does
// not report, and returns how many tasks it bound. c.mu is held.
func (c *Coordinator) adopt(n *node, reports []api.TaskReport, now time.Time) int {
	reported := map[string]bool{}
	for _, r := range reports {
		reported[r.TaskID] = true
	}
	adopted := 0
	for _, j := range c.jobs {
		if j.state != api.JobRunning {
			continue
		}
		var lost, handed []string
		bound := 0
		for _, t := range j.tasks {
			if t.nodeName != n.req.Name {
				continue
			}
			switch {
			case reported[t.task.TaskID]:
			case n.req.Previous != "" && t.registration() == n.req.Previous:
				handed = append(handed, t.task.TaskID)
			default:
				lost = append(lost, t.task.TaskID)
				continue
			}
			t.node = n
			bound++
		}
		adopted += bound
		if len(lost) > 0 {
			c.failRunning(j, fmt.Sprintf("%s registered again without task(s) %s (the daemon restarted or its lease ran out)",
				n.describe(), strings.Join(lost, ", ")), now, lostNode{name: n.req.Name, dead: true})
			continue
		}
		if len(handed) > 0 {
			c.log.Info("handing over tasks the node never got", "job", j.id, "node", n.req.Name, "previous", n.req.Previous, "tasks", handed)
		}
		if bound > 0 {
			restoreBalance(j)
			c.save(j) // its tasks there are bound to n's registration now
		}
	}
	return adopted
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
	n, resp, err := c.applyHeartbeat(id, hb)
	if err != nil {
		c.mu.Unlock()
		return resp, err
	}
	recorded, wait := c.recorded(), n.recordWait()
	c.mu.Unlock()
	awaitRecorded(recorded, wait)
	return resp, nil
}

// recorded yields once every change made so far is committed to the state
// database (or its commit failed); nil without one. c.mu is held.
func (c *Coordinator) recorded() <-chan error {
	if c.store == nil {
		return nil
	}
	return c.store.Flushed()
}

// awaitRecorded waits for recorded, up to wait. A node is handed its tasks
// only once the change that made them is on disk: a coordinator killed
// between handing a change out and recording it would come back with an
// older make-up than its nodes run. A commit that fails is not waited for
// (the database cannot record; /readyz and the log say so).
func awaitRecorded(recorded <-chan error, wait time.Duration) {
	if recorded == nil {
		return
	}
	select {
	case <-recorded:
	case <-time.After(wait):
	}
}

// checkLease refuses a node whose lease would run out between two of this
// coordinator's heartbeats: it needs two intervals at least, or one late
// answer fences its tasks and its checkpoint writes find the lease over.
func (c *Coordinator) checkLease(req api.RegisterRequest) error {
	lease, least := req.Lease(), 2*c.cfg.HeartbeatInterval
	if lease > 0 && lease < least {
		return fmt.Errorf("node %s: its lease of %v is shorter than two of this coordinator's heartbeat intervals (%v): it would stop its tasks whenever an answer came late; give it a lease of %v or more (the coordinator declares a silent node dead after %v)",
			req.Name, lease, c.cfg.HeartbeatInterval, least, c.cfg.HeartbeatTimeout)
	}
	return nil
}

// recordWait is how long n's heartbeat answer may wait for a commit: a
// quarter of its lease (a node waits for an answer no longer than its
// lease, and fences its tasks when none comes), at most 5 s; a disk slower
// than that gets the change handed out before it is durable.
func (n *node) recordWait() time.Duration {
	const most = 5 * time.Second
	if n.lease() > 0 {
		return min(most, n.lease()/4)
	}
	return most
}

// applyHeartbeat takes a heartbeat's reports and returns the node and its
// tasks. c.mu is held.
func (c *Coordinator) applyHeartbeat(id string, hb api.Heartbeat) (*node, api.HeartbeatResponse, error) {
	n := c.node(id)
	switch {
	case n == nil:
		return nil, api.HeartbeatResponse{}, httpErrorf(http.StatusNotFound, "no node %q: register first", id)
	case !n.alive():
		return nil, api.HeartbeatResponse{}, httpErrorf(http.StatusGone, "node %s is dead (%s): register again", id, n.reason)
	}
	now := time.Now()
	n.lastSeen = now
	for _, r := range hb.Tasks {
		if !hb.Leaving || r.State != api.TaskFailed {
			c.applyReport(n, r, now)
		}
	}
	if hb.Leaving {
		n.left = true
		c.declareDead(n, fmt.Sprintf("%s shut down", n.describe()), now)
	}
	return n, api.HeartbeatResponse{Tasks: c.tasksOf(n)}, nil
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
	c.forgiveStall(now)
	for _, n := range c.nodes {
		if n.alive() && now.Sub(n.lastSeen) > c.cfg.HeartbeatTimeout {
			c.declareDead(n, fmt.Sprintf("%s missed heartbeats for %s", n.describe(), c.cfg.HeartbeatTimeout), now)
		}
	}
	c.checkAdoptions(now)
	c.checkStore(now)
	c.checkFinalCheckpoints(now)
	c.balanceJobs()
	c.pruneNodes(now)
}

// forgiveStall gives every live node a whole heartbeat timeout from now
// when the coordinator itself has not run for longer than stalledAfter
// (SIGSTOP, a paused VM, a swap storm): the heartbeats its nodes sent
// meanwhile waited unread, and declaring them dead would shrink or
// restart every job although each node trained on under its lease. A node
// that did die is declared so one timeout later. c.mu is held.
func (c *Coordinator) forgiveStall(now time.Time) {
	last := c.lastReap
	c.lastReap = now
	stalled := now.Sub(last)
	if last.IsZero() || stalled <= c.stalledAfter() {
		return
	}
	c.stalls++
	c.log.Warn("the coordinator did not run for a while (stopped, paused or starved); its nodes get a heartbeat timeout from now before any is declared dead",
		"stalled", stalled.Round(time.Millisecond), "heartbeat_timeout", c.cfg.HeartbeatTimeout)
	for _, n := range c.nodes {
		if n.alive() {
			n.lastSeen = now
		}
	}
}

// stalledAfter is the gap between two reaps that says the coordinator was
// stopped rather than busy: half a heartbeat timeout, four of reap's ticks.
func (c *Coordinator) stalledAfter() time.Duration { return c.cfg.HeartbeatTimeout / 2 }

// declareDead marks n dead. A running job with a task on it goes on
// without n's stage replicas if it can (shrink), else it fails; restarts
// wait for n's lease to run out, unless n said it was shutting down.
// c.mu is held.
func (c *Coordinator) declareDead(n *node, reason string, now time.Time) {
	n.state, n.reason, n.died = api.NodeDead, reason, now
	c.log.Warn("node dead", "node", n.req.Name, "node_id", n.id, "reason", reason)
	c.wake()
	leaseEnd := n.lastSeen.Add(n.lease())
	if n.left {
		leaseEnd = now
	}
	for _, j := range c.jobs {
		if !j.hasTaskOn(n) {
			continue
		}
		switch {
		case j.state == api.JobRunning && c.shrink(j, n, now, causeDied):
			j.addLost(lostNode{name: n.req.Name, dead: true}) // a later failure in its wake is not the survivors' fault
			continue
		case j.state == api.JobRunning:
			c.failRunning(j, reason, now, lostNode{name: n.req.Name, dead: true})
		case j.state == api.JobRestarting:
			j.addLost(lostNode{name: n.req.Name, dead: true})
		}
		if j.state == api.JobRestarting && j.notBefore.Before(leaseEnd) {
			j.notBefore = leaseEnd
		}
	}
}

func (j *job) hasTaskOn(n *node) bool {
	for _, t := range j.tasks {
		if t.node == n {
			return true
		}
	}
	return false
}

// checkAdoptions fails the running jobs taken up from the state database
// whose nodes did not register again in time. c.mu is held.
func (c *Coordinator) checkAdoptions(now time.Time) {
	for _, j := range c.jobs {
		if j.state != api.JobRunning || j.adoptBy.IsZero() || now.Before(j.adoptBy) {
			continue
		}
		var missing []string
		for _, t := range j.tasks {
			if t.node == nil && !slices.Contains(missing, t.nodeName) {
				missing = append(missing, t.nodeName)
			}
		}
		j.adoptBy = time.Time{}
		if len(missing) > 0 {
			reason := fmt.Sprintf("node(s) %s did not register again within %s of the coordinator's restart", strings.Join(missing, ", "), c.cfg.AdoptionTimeout)
			for _, name := range missing {
				j.addLost(lostNode{name: name, dead: true})
			}
			c.failRunning(j, reason, now, lostNode{name: missing[0], dead: true})
		}
	}
}

// nodeStatuses lists every node, dead ones included. c.mu is held.
func (c *Coordinator) nodeStatuses() []api.NodeStatus {
	out := make([]api.NodeStatus, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, c.nodeStatusOf(n))
	}
	return out
}

// nodeStatusOf is n as GET /v1/nodes shows it. c.mu is held.
func (c *Coordinator) nodeStatusOf(n *node) api.NodeStatus {
	tasks := []string{}
	for _, t := range c.tasksOf(n) {
		tasks = append(tasks, t.TaskID)
	}
	gpus := n.req.GPUs
	if gpus == nil {
		gpus = []api.GPU{}
	}
	return api.NodeStatus{ID: n.id, Name: n.req.Name, DataAddr: n.req.DataAddr, PSAddr: n.req.PSAddr, Type: n.req.Type,
		Units: n.req.Units, Cores: n.req.Cores, MemoryBytes: n.req.MemoryBytes, GPUs: gpus, State: n.state,
		Reason: n.reason, Draining: c.draining(n), Registered: n.registered, LastHeartbeat: n.lastSeen, Tasks: tasks}
}
