package coord

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// TestAnEndedJobKeepsItsProgressAcrossARestart: a restarted coordinator
// shows a job that ended before it with the step, loss and throughput its
// tasks last reported, not 0; a running job's reports are not kept (its
// nodes report again).
func TestAnEndedJobKeepsItsProgressAcrossARestart(t *testing.T) {
	jf, _ := jobAndModel(t, ctrJob)
	plan := &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 2}}}
	planJSON, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, state := range []api.JobState{api.JobDone, api.JobFailed, api.JobRunning} {
		j := &job{id: "j1", source: ctrJob, file: jf, state: state, plan: plan, planJSON: planJSON, finished: time.Now()}
		for r, step := range []int64{9, 7} {
			t := &taskRun{job: j, task: api.Task{TaskID: "j1.s0.r" + string(rune('0'+r)), Role: api.RoleStage, Replica: r}}
			t.report = api.TaskReport{TaskID: t.task.TaskID, Step: step, Loss: 0.5, SamplesPerS: 1000, Batch: 256,
				Checkpoints: []api.ShardCheckpoint{{Step: 5}}}
			j.tasks = append(j.tasks, t)
		}
		back, err := jobFromRecord(j.record())
		if err != nil {
			t.Fatal(err)
		}
		want, got := api.JobStatus{Steps: jf.TotalSteps()}, api.JobStatus{Steps: jf.TotalSteps()}
		(&Coordinator{}).fold(j, &want)
		(&Coordinator{}).fold(back, &got)
		kept := got.Step == want.Step && got.Loss == want.Loss && got.SamplesPerS == want.SamplesPerS
		if kept != state.Final() || got.Step != 7 && state.Final() {
			t.Errorf("%s job: step %d, loss %g, %g samples/s after a restart, %d, %g, %g before", state, got.Step, got.Loss,
				got.SamplesPerS, want.Step, want.Loss, want.SamplesPerS)
		}
		if state.Final() && back.tasks[0].report.Checkpoints != nil {
			t.Errorf("%s job: the task's checkpoint files kept in its record", state)
		}
	}
}
