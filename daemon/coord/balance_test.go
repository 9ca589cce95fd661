package coord

import (
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/sched"
)

// TestMaxBatchFollowsTheNodesMemory: a replica's largest batch is the
// largest whose stage estimate fits the node's memory.
func TestMaxBatchFollowsTheNodesMemory(t *testing.T) {
	m, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	last := len(m.Shapes()) - 1
	j := &job{file: &config.Job{Batch: 4096}, model: m, plan: &sched.Plan{Stages: []sched.Stage{{First: 0, Last: last}}}}
	at300, err := nn.EstimateStage(m, 0, last, 300, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := maxBatchFor(j, 0, at300); got != 300 {
		t.Errorf("memory for exactly 300 samples: max batch %d", got)
	}
	if got := maxBatchFor(j, 0, 0); got != 4096 {
		t.Errorf("no memory reported: max batch %d, want the job's 4096", got)
	}
	if got := maxBatchFor(j, 0, 1<<50); got != 4096 {
		t.Errorf("plenty of memory: max batch %d, want the job's 4096", got)
	}
}
