package coord

import (
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// TestResizeStartsAtTheOpenStep: a replica that has reported k completed
// steps may have pushed step k while another never did, so step k can
// still be open at the parameter servers: the new membership must start
// there, not at k+1, or the survivors wait for the dead replica forever.
func TestResizeStartsAtTheOpenStep(t *testing.T) {
	c := &Coordinator{cfg: Config{Catalog: &config.Catalog{}}.withDefaults()}
	c.log = c.cfg.Logger
	jf := &config.Job{Batch: 64, Mode: api.ModeBSP}
	j := &job{id: "j1", file: jf, state: api.JobRunning, gen: 1, plan: &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 3}}}}
	for r, step := range []int64{10, 12, 7} {
		j.tasks = append(j.tasks, &taskRun{job: j, task: api.Task{TaskID: "s", Role: api.RoleStage, Replica: r, Units: 1, Batch: 21},
			report: api.TaskReport{Step: step}})
	}
	j.tasks = append(j.tasks, &taskRun{job: j, task: api.Task{TaskID: "ps", Role: api.RolePS}})
	from := c.resize(j, []int{0, 1}, []int{32, 32})
	if from != 10 {
		t.Errorf("resize from step %d, want 10: replica 0 reported 10 steps, step 10 may be open", from)
	}
	if len(j.tasks) != 3 || j.gen != 2 {
		t.Fatalf("%d tasks, generation %d; want replica 2 gone and generation 2", len(j.tasks), j.gen)
	}
	for _, tr := range j.tasks {
		if tr.task.Generation != 2 || tr.task.FromStep != 10 || len(tr.task.Members) != 2 {
			t.Errorf("task %s replica %d: %+v", tr.task.TaskID, tr.task.Replica, tr.task)
		}
	}
}
