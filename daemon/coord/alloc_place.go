package coord

import (
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// Placement with the allocator on (alloc.go): a node hosts as many stage
// tasks as it has units, each holding one unit as far as placement goes
// (the allocator then divides the node's units among them), and a new job
// is planned on one unit of a type, the smallest placement, which goes to
// the node with the most free slots.

// shareNodes makes cl see nodes as shared: a node is busy only once it
// hosts a stage task per unit. c.mu is held.
func (c *Coordinator) shareNodes(cl *cluster) {
	cl.slots = map[*node]int{}
	for _, n := range cl.live {
		cl.slots[n] = n.req.Units
	}
	for _, o := range c.jobs {
		if o.state != api.JobRunning {
			continue
		}
		for _, t := range o.tasks {
			if t.node != nil && t.task.Role == api.RoleStage {
				cl.slots[t.node]--
			}
		}
	}
	for _, n := range cl.live {
		cl.busy[n] = cl.slots[n] <= 0
	}
}

// offer is what placement ranks a free node by: its free slots when nodes
// are shared, else the units it offers a stage.
func (cl cluster) offer(n *node) int {
	if cl.slots != nil {
		return cl.slots[n]
	}
	return n.stageUnits()
}

// oneUnitEach caps every type's free units at one, so that the scheduler
// plans the smallest placement.
func oneUnitEach(free map[string]int) map[string]int {
	for t, u := range free {
		free[t] = min(u, 1)
	}
	return free
}

// planFile is the job file the scheduler plans j from: with the allocator
// on, without a throughput limit, which one unit could not meet while the
// allocator is what gives the job its units.
func (c *Coordinator) planFile(j *job) *config.Job {
	if c.allocPolicy() == "" || j.file.ThroughputLimit == 0 {
		return j.file
	}
	jf := *j.file
	jf.ThroughputLimit = 0
	return &jf
}
