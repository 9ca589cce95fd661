package node

// Summary is what a person wants to see of a node daemon at a glance
// (heterpsd puts it in systemd's STATUS= line).
type Summary struct {
	// ID is the id the coordinator gave the node, empty until it has
	// registered (and again while it registers anew).
	ID    string
	Tasks int
}

// Summary says whether the node is registered and how many tasks it holds.
func (a *Agent) Summary() Summary {
	a.obs.mu.Lock()
	id := a.obs.nodeID
	a.obs.mu.Unlock()
	return Summary{ID: id, Tasks: len(a.reports())}
}
