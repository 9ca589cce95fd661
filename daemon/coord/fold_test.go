package coord

import (
	"math"
	"testing"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// TestFoldWeighsLossesByBatch: replicas with unequal batches report their
// last step's loss; the job's loss counts every sample alike.
func TestFoldWeighsLossesByBatch(t *testing.T) {
	j := &job{plan: &sched.Plan{Stages: []sched.Stage{{First: 0, Last: 1}}}}
	for k, r := range []struct {
		batch int
		loss  float64
	}{{800, 0.5}, {200, 1.0}} {
		j.tasks = append(j.tasks, &taskRun{job: j,
			task:   api.Task{Role: api.RoleStage, Stage: 0, Replica: k, Batch: r.batch},
			report: api.TaskReport{TaskID: "t", Step: 3, Batch: r.batch, Loss: r.loss}})
	}
	var s api.JobStatus
	(&Coordinator{}).fold(j, &s)
	if want := (800*0.5 + 200*1.0) / 1000; math.Abs(s.Loss-want) > 1e-12 {
		t.Fatalf("job loss %v, want the batch-weighted %v (the unweighted mean is 0.75)", s.Loss, want)
	}
}
