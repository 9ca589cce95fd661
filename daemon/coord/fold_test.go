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

// A stage's replicas that end apart (asynchronous ones) count their samples
// over the stage's whole time, not each over its own window; while any
// still trains, and for replicas that report no window, the stage is the
// sum of their rates.
func TestFoldCountsReplicasThatEndApartOverTheStagesTime(t *testing.T) {
	fold := func(steps [2]int64, windows [2]float64) float64 {
		j := &job{plan: &sched.Plan{Stages: []sched.Stage{{First: 0, Last: 1}}}}
		for k, r := range []struct{ rate float64 }{{100}, {50}} {
			j.tasks = append(j.tasks, &taskRun{job: j, task: api.Task{Role: api.RoleStage, Stage: 0, Replica: k, Batch: 8},
				report: api.TaskReport{TaskID: "t", Step: steps[k], Batch: 8, SamplesPerS: r.rate, TimedSeconds: windows[k]}})
		}
		s := api.JobStatus{Steps: 10}
		(&Coordinator{}).fold(j, &s)
		if s.Stages[0].MeasuredThroughput != s.SamplesPerS {
			t.Fatalf("job %v samples/s, its only stage %v", s.SamplesPerS, s.Stages[0].MeasuredThroughput)
		}
		return s.SamplesPerS
	}
	for _, c := range []struct {
		steps   [2]int64
		windows [2]float64
		want    float64
	}{
		{[2]int64{10, 10}, [2]float64{2, 4}, (100*2 + 50*4) / 4.0}, // both ended: 400 samples in 4 s
		{[2]int64{10, 10}, [2]float64{4, 4}, 150},                  // in step: the sum
		{[2]int64{10, 7}, [2]float64{2, 3}, 150},                   // one still trains: the live sum
		{[2]int64{10, 10}, [2]float64{2, 0}, 150},                  // no window reported
	} {
		if got := fold(c.steps, c.windows); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("steps %v, windows %v: %v samples/s, want %v", c.steps, c.windows, got, c.want)
		}
	}
}
