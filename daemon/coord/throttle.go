package coord

import (
	"context"
	"fmt"
	"maps"
	"net/http"

	"github.com/heterps/heterps/daemon/api"
)

// cpuShare is what the coordinator knows of a node's CPU share: what the
// node last reported applying. The share a throttle asked for is kept by
// node name (Coordinator.throttles), so that it outlives restarts of the
// daemon and of the coordinator.
type cpuShare struct {
	reported float64 // 0: nothing reported since registering (then req.CPUShare)
	mode     string
}

// share is the share n reports applying (1 when it reports none) and how.
func (n *node) share() (float64, string) {
	share, mode := n.cpu.reported, n.cpu.mode
	if share == 0 {
		share, mode = n.req.CPUShare, n.req.CPUShareMode
	}
	if share == 0 {
		share = 1
	}
	return share, mode
}

// pendingShare is the share n is to be handed in its heartbeat reply: the
// one asked of its name while n does not report applying it, else 0.
// c.mu is held.
func (c *Coordinator) pendingShare(n *node) float64 {
	if share, _ := n.share(); c.throttles[n.req.Name] != 0 && c.throttles[n.req.Name] != share {
		return c.throttles[n.req.Name]
	}
	return 0
}

// throttle records that node idOrName (an id, or the name of a live node)
// is to run at req's share, and returns its status once the share is
// stored: its next heartbeat reply hands the share on, and the share is
// kept by node name, in the state database, across the node's and the
// coordinator's restarts.
func (c *Coordinator) throttle(ctx context.Context, idOrName string, req api.ThrottleRequest) (api.NodeStatus, error) {
	if err := req.Validate(); err != nil {
		return api.NodeStatus{}, badRequest("throttle: %v", err)
	}
	c.mu.Lock()
	n := c.nodeByIDOrName(idOrName)
	switch {
	case n == nil:
		c.mu.Unlock()
		return api.NodeStatus{}, httpErrorf(http.StatusNotFound, "throttle: no node %q", idOrName)
	case !n.alive():
		c.mu.Unlock()
		return api.NodeStatus{}, httpErrorf(http.StatusConflict, "throttle: node %s is dead (%s)", n.id, n.reason)
	}
	c.throttles[n.req.Name] = req.CPUShare
	c.log.Info("node throttled", "node", n.req.Name, "node_id", n.id, "cpu_share", req.CPUShare)
	saved := c.saveThrottles()
	status := c.withShare(c.nodeStatusOf(n), n)
	c.mu.Unlock()
	if err := saved(ctx); err != nil {
		return api.NodeStatus{}, fmt.Errorf("throttle %s: storing the share: %w", n.req.Name, err)
	}
	return status, nil
}

// saveThrottles stores the shares throttles asked for and returns what
// waits for the commit. c.mu is held.
func (c *Coordinator) saveThrottles() func(context.Context) error {
	if c.store == nil {
		return func(context.Context) error { return nil }
	}
	return commitOf(c.store.PutThrottles(maps.Clone(c.throttles)))
}

// nodeByIDOrName is the node with id key, else the live node named key.
// c.mu is held.
func (c *Coordinator) nodeByIDOrName(key string) *node {
	if n := c.node(key); n != nil {
		return n
	}
	for _, n := range c.nodes {
		if n.alive() && n.req.Name == key {
			return n
		}
	}
	return nil
}

// exchangeShare records the share node id reports in hb and returns the
// share to hand it (0: none).
func (c *Coordinator) exchangeShare(id string, hb api.Heartbeat) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(id)
	if n == nil {
		return 0
	}
	if hb.CPUShare != 0 {
		n.cpu.reported, n.cpu.mode = hb.CPUShare, hb.CPUShareMode
	}
	return c.pendingShare(n)
}

// addShares fills in the CPU shares of node statuses. c.mu is held.
func (c *Coordinator) addShares(statuses []api.NodeStatus) {
	byID := make(map[string]*node, len(c.nodes))
	for _, n := range c.nodes {
		byID[n.id] = n
	}
	for i := range statuses {
		if n := byID[statuses[i].ID]; n != nil {
			statuses[i] = c.withShare(statuses[i], n)
		}
	}
}

// withShare is s with n's CPU share and the share asked of its name.
// c.mu is held.
func (c *Coordinator) withShare(s api.NodeStatus, n *node) api.NodeStatus {
	s.CPUShare, s.CPUShareMode = n.share()
	s.CPUShareRequested = c.throttles[n.req.Name]
	return s
}
