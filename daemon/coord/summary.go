package coord

import "github.com/heterps/heterps/daemon/api"

// Summary is what a person wants to see of a coordinator at a glance
// (heterpsd puts it in systemd's STATUS= line).
type Summary struct {
	AliveNodes, RunningJobs, QueuedJobs int
}

// Summary counts the live nodes and the running and queued jobs. It takes
// the coordinator's lock, so a caller that gets an answer also knows the
// coordinator is not stuck holding it (heterpsd's watchdog relies on that).
func (c *Coordinator) Summary() Summary {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s Summary
	for _, n := range c.nodes {
		if n.state == api.NodeAlive {
			s.AliveNodes++
		}
	}
	for _, j := range c.jobs {
		switch j.state {
		case api.JobRunning:
			s.RunningJobs++
		case api.JobQueued:
			s.QueuedJobs++
		}
	}
	return s
}
