package coord

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// threeReplicaJob is a running BSP job of batch 64 over replicas 0, 1 and
// 2 (batches 21, 21, 22), which have reported steps steps at 100 steps a
// second, and a PS task, on a coordinator of its own.
func threeReplicaJob(steps ...int64) (*Coordinator, *job) {
	c := &Coordinator{cfg: Config{Catalog: &config.Catalog{}}.withDefaults()}
	c.log = c.cfg.Logger
	jf := &config.Job{Batch: 64, Mode: api.ModeBSP}
	j := &job{id: "j1", file: jf, state: api.JobRunning, gen: 1, plan: &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 3}}}}
	batches := []int{21, 21, 22}
	for r, step := range steps {
		j.tasks = append(j.tasks, &taskRun{job: j, task: api.Task{TaskID: "s", Role: api.RoleStage, Replica: r, Units: 1, Batch: batches[r],
			Members: []int{0, 1, 2}, Batches: batches}, report: api.TaskReport{Step: step, Batch: batches[r], SamplesPerS: float64(batches[r]) * 100}})
	}
	j.tasks = append(j.tasks, &taskRun{job: j, task: api.Task{TaskID: "ps", Role: api.RolePS}})
	return c, j
}

// TestResizeStartsAtTheOpenStep: a replica that has reported k completed
// steps may have pushed step k while another never did, so step k can
// still be open at the parameter servers: the new membership must start
// there, not at k+1, or the survivors wait for the dead replica forever.
func TestResizeStartsAtTheOpenStep(t *testing.T) {
	c, j := threeReplicaJob(10, 12, 7)
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
	if st := c.status(j, time.Now()).Stages[0]; !slices.Equal(st.Replicas, []int{0, 1}) || !slices.Equal(st.Batches, []int{32, 32}) {
		t.Errorf("status shows replicas %v with batches %v, want [0 1] and [32 32]", st.Replicas, st.Batches)
	}
}

// TestABSPBatchChangeStartsAheadOfEveryReplica: a change of the batches
// alone (the batch controller's, a PATCH that keeps the replicas) takes
// effect rebatchMargin steps past the furthest replica, so that every
// replica takes it at that one step and shards the same data segment; the
// next change, while that step is still ahead far enough, takes the same
// step instead of putting it off; a change that drops a replica, or one of
// an ASP stage, still starts at the open step.
func TestABSPBatchChangeStartsAheadOfEveryReplica(t *testing.T) {
	c, j := threeReplicaJob(10, 12, 7)
	margin := c.rebatchMargin(j)
	if margin < minRebatchSteps {
		t.Fatalf("margin %d, want at least %d", margin, minRebatchSteps)
	}
	from := c.resize(j, []int{0, 1, 2}, []int{16, 24, 24})
	if from != 12+margin {
		t.Errorf("a batch change from step %d, want %d: the furthest replica's 12 and the margin %d", from, 12+margin, margin)
	}
	for _, tr := range j.tasks {
		if tr.task.Generation != 2 || tr.task.FromStep != from || !slices.Equal(tr.task.Batches, []int{16, 24, 24}) || tr.task.DataStart != 0 {
			t.Errorf("task %s replica %d: %+v", tr.task.TaskID, tr.task.Replica, tr.task)
		}
	}
	if got := j.changesAhead(); got != from {
		t.Errorf("changesAhead %d while no replica has reached step %d", got, from)
	}
	j.tasks[1].report.Step = 13
	if again := c.resize(j, []int{0, 1, 2}, []int{20, 22, 22}); again != from {
		t.Errorf("the next batch change from step %d, want the pending %d, still %d steps ahead", again, from, from-13)
	}
	for _, tr := range stageRuns(j) {
		tr.report.Step = from
	}
	if got := j.changesAhead(); got != 0 {
		t.Errorf("changesAhead %d once every replica completed step %d", got, from)
	}
	if next := c.resize(j, []int{0, 1, 2}, []int{16, 24, 24}); next != from+margin {
		t.Errorf("a batch change after the last took effect from step %d, want %d", next, from+margin)
	}
	for _, tr := range stageRuns(j) {
		tr.report.Step = from + margin - 1
	}
	if late := c.resize(j, []int{0, 1, 2}, []int{20, 22, 22}); late != from+2*margin-1 {
		t.Errorf("a batch change a step before the pending one from step %d, want a new step %d: the pending one may have been read", late, from+2*margin-1)
	}
	if drop := c.resize(j, []int{0, 1}, []int{32, 32}); drop != j.tasks[0].report.Step {
		t.Errorf("dropping replica 2 from step %d, want the open step %d", drop, j.tasks[0].report.Step)
	}
	j.file.Mode = api.ModeASP
	if from := c.resize(j, []int{0, 1}, []int{40, 24}); from != j.tasks[0].report.Step {
		t.Errorf("an ASP stage's batch change from step %d, want the open step %d: its slower replica would wait for the faster's", from, j.tasks[0].report.Step)
	}
}

// TestAllreduceStagesKeepTheirReplicas: a job whose stage syncs by
// allreduce is not shrunk when a replica's node dies (it fails, and
// restarts from a checkpoint if allowed), and a PATCH that drops a replica
// is refused naming why; the replicas would have to agree on the step.
func TestAllreduceStagesKeepTheirReplicas(t *testing.T) {
	c := &Coordinator{cfg: Config{Catalog: &config.Catalog{}}.withDefaults()}
	c.log = c.cfg.Logger
	jf := &config.Job{Batch: 64, Mode: api.ModeBSP}
	j := &job{id: "j1", file: jf, state: api.JobRunning, gen: 1, plan: &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 2}}}}
	layout := []api.StageLayout{{Replicas: 2, DenseSync: api.DenseSyncAllreduce}}
	nodes := []*node{{id: "a"}, {id: "b"}}
	for r := range 2 {
		j.tasks = append(j.tasks, &taskRun{job: j, node: nodes[r], task: api.Task{TaskID: "s", Role: api.RoleStage, Replica: r, Units: 1,
			Batch: 32, Layout: layout}, report: api.TaskReport{Step: 5}})
	}
	j.tasks = append(j.tasks, &taskRun{job: j, node: nodes[0], task: api.Task{TaskID: "ps", Role: api.RolePS, Layout: layout}})
	c.jobs = append(c.jobs, j)
	if c.shrink(j, nodes[1], time.Now(), causeDied) || len(j.tasks) != 3 || j.gen != 1 {
		t.Fatalf("shrunk an allreduce job: %d tasks, generation %d", len(j.tasks), j.gen)
	}
	_, err := c.patch("j1", api.ResizeRequest{Stage: 0, Replicas: []int{0}, Batches: []int{64}})
	var he *httpError
	if !errors.As(err, &he) || he.status != http.StatusConflict || !strings.Contains(he.msg, "allreduce") {
		t.Fatalf("PATCH dropping a replica of an allreduce stage: %v, want 409 naming allreduce", err)
	}
}
