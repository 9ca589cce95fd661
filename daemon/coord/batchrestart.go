package coord

import (
	"fmt"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/batching"
)

// Kill-restart resizing (batching.resize = "restart"), the Dynamic
// Batching paper's method, kept to compare with resizing in place: when
// the controller decides a new split, the job restarts from the newest
// complete checkpoint of its chain (the machinery of restart.go: a new job
// id, the same queue place) with the new batches fixed in the restarted
// job's placement. The steps after that checkpoint are trained again:
// that is the method's cost. The restart is not a failure: it does not
// count against checkpoint.restarts, avoids no node and waits no backoff,
// only for the job's nodes to have heartbeated since (so that its tasks
// have stopped). The controller, its adjustments and the count of such
// restarts carry over to the restarted job (batchCarry), so it does not
// start from uniform again; they live in the coordinator's memory only.

// batchCarry is what a kill-restart resize hands on to the restarted job.
type batchCarry struct {
	// mode, when set, is the mode to keep instead of resolving the job
	// file's again (a job adopted after a coordinator restart: "auto"
	// resolved at placement, on the shares the nodes had then).
	mode        string
	lanes       []int          // the new batch of each lane
	byNode      map[string]int // the same, by the node of the lane's first wide replica
	ctl         *batching.Controller
	adjustments int
	restarts    int
}

// restartForBatches restarts j (running, its controller having decided
// lanes) to resize its batches. c.mu is held.
func (c *Coordinator) restartForBatches(j *job, lanes []int) {
	b := j.balance
	carry := &batchCarry{lanes: slices.Clone(lanes), byNode: map[string]int{}, ctl: b.ctl,
		adjustments: b.adjustments, restarts: b.restarts + 1}
	k := 0
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage && t.task.Stage == b.shape.wide[0] && k < len(lanes) {
			carry.byNode[t.nodeName] = lanes[k]
			k++
		}
	}
	j.resizeTo, b.restarts = carry, carry.restarts
	c.log.Info("job restarting to resize its batches", "job", j.id, "batches", lanes, "restarts", carry.restarts)
	c.startMove(j, fmt.Sprintf("restarting to resize its batches to %v (batching.resize = restart)", lanes), time.Now())
}

// lanesFor is the carried batches for a new placement: lane k gets the
// batch carried for the node of its first wide replica. false when the
// placement's lanes are not on the nodes the batches were chosen for.
func (c *batchCarry) lanesFor(pl *placement, shape laneShape, global int) ([]int, bool) {
	if shape.lanes != len(c.lanes) {
		return nil, false
	}
	out := make([]int, shape.lanes)
	total := 0
	for k, r := range pl.stages[shape.wide[0]] {
		b, ok := c.byNode[r.node.req.Name]
		if !ok {
			return nil, false
		}
		out[k] = b
		total += b
	}
	return out, total == global
}
