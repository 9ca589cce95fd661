package coord

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// askFailingNodes makes the PS tasks of nodes report each checkpoint they
// are asked for as skipped, training having passed its step: what a node
// that heard of the ask too late says.
func askFailingNodes(nodes []*fakeNode) {
	for _, n := range nodes {
		n.report = func(t api.Task, r *api.TaskReport) {
			if t.Role != api.RolePS {
				r.Step = min(t.Steps, r.Step+1)
				r.State, r.SamplesPerS, r.Batch = api.TaskRunning, float64(t.Batch)*10, t.Batch
				return
			}
			r.State = api.TaskRunning
			if at := t.CheckpointAt; at > 0 && (r.CheckpointFailure == nil || r.CheckpointFailure.Step != at) {
				r.CheckpointFailure = &api.CheckpointFailure{Step: at, Error: "skipped: training passed the step asked for before this node heard of it"}
				r.CheckpointFailures++
			}
		}
	}
}

// TestAnAskedCheckpointIsAskedAgainLater: a checkpoint asked for goes to
// the job's PS tasks at a step ahead of its replicas; when the servers
// say training passed that step, the coordinator asks again at a later
// one, and gives up after maxAskTries, saying so in the job's failure.
func TestAnAskedCheckpointIsAskedAgainLater(t *testing.T) {
	tc := startCluster(t, nil)
	job := strings.Replace(ctrJob, "steps = 12", "steps = 1000000", 1) + fmt.Sprintf("[checkpoint]\ndir = %q\n", t.TempDir())
	nodes := tc.nodesFor(tc.expectedPlan(job))
	askFailingNodes(nodes)
	id := tc.submit(job)
	waitFor(t, "job running", func() bool { return tc.job(id).Step > 0 })
	var asked api.JobStatus
	tc.call("POST", "/v1/jobs/"+id+"/checkpoint", nil, http.StatusOK, &asked)
	if a := asked.CheckpointAsked; a == nil || a.Step <= asked.Step || a.Tries != 1 {
		t.Fatalf("asked at step %d: %+v, want one try at a later step", asked.Step, a)
	}
	var again api.JobStatus
	tc.call("POST", "/v1/jobs/"+id+"/checkpoint", nil, http.StatusOK, &again)
	if a := again.CheckpointAsked; a == nil || a.Tries > 2 {
		t.Fatalf("asked twice: %+v, want the open ask, not a new one", a)
	}
	var seen []int64
	waitFor(t, "the ask given up", func() bool {
		s := tc.job(id)
		if a := s.CheckpointAsked; a != nil && (len(seen) == 0 || seen[len(seen)-1] != a.Step) {
			seen = append(seen, a.Step)
		}
		return s.CheckpointAsked == nil
	})
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Errorf("asked at steps %v, want each later than the last", seen)
		}
	}
	s := tc.job(id)
	if f := s.CheckpointFailure; f == nil || !strings.Contains(f.Error, "skipped") || f.Step < asked.CheckpointAsked.Step || len(seen) < 2 {
		t.Fatalf("failure %+v after asks at %v", f, seen)
	}
	_, current, _ := nodes[len(nodes)-1].snapshot()
	for _, task := range current {
		if task.Role == api.RolePS && task.CheckpointAt != s.CheckpointFailure.Step {
			t.Errorf("PS task %s asked at step %d, want the last ask's %d", task.TaskID, task.CheckpointAt, s.CheckpointFailure.Step)
		}
	}
}

// TestACheckpointIsAskedOnlyOfARunningJobWithADirectory: the ask names
// what is missing.
func TestACheckpointIsAskedOnlyOfARunningJobWithADirectory(t *testing.T) {
	tc := startCluster(t, nil)
	noDir := tc.submit(ctrJob + "throughput_limit = 1e12\n")
	tc.waitJob(noDir)
	withDir := tc.submit(ctrJob + "throughput_limit = 1e12\n" + fmt.Sprintf("[checkpoint]\ndir = %q\n", t.TempDir()))
	tc.waitJob(withDir)
	for _, c := range []struct{ id, want string }{
		{"j404", "no job"},
		{noDir, "has no checkpoint.dir"},
		{withDir, "is failed: only a running job can be checkpointed"},
	} {
		status, body := tc.do("POST", "/v1/jobs/"+c.id+"/checkpoint", "", nil)
		if status/100 == 2 || !strings.Contains(string(body), c.want) {
			t.Errorf("job %s: %d %s, want an error saying %q", c.id, status, body, c.want)
		}
	}
}

// TestAskedStepsAreWhereAllreduceStagesMirror: a job with an allreduce
// stage is asked at the next multiple of its grid or interval, or at its
// last step; a PS-synced job at the step named.
func TestAskedStepsAreWhereAllreduceStagesMirror(t *testing.T) {
	task := func(sync string, every, grid int64) *job {
		return &job{tasks: []*taskRun{{task: api.Task{Steps: 1000, CheckpointEvery: every, CheckpointGrid: grid,
			Layout: []api.StageLayout{{Replicas: 2, DenseSync: sync}}}}}}
	}
	for _, c := range []struct {
		sync              string
		every, grid, from int64
		want              int64
	}{
		{api.DenseSyncPS, 100, 30, 41, 41},
		{api.DenseSyncAllreduce, 0, 30, 41, 60},
		{api.DenseSyncAllreduce, 50, 30, 41, 50},
		{api.DenseSyncAllreduce, 0, 30, 60, 60},
		{api.DenseSyncAllreduce, 0, 0, 41, 1000},
		{api.DenseSyncAllreduce, 0, 400, 801, 1000},
	} {
		if got := mirrorStepFrom(task(c.sync, c.every, c.grid), c.from); got != c.want {
			t.Errorf("%s every %d grid %d from %d: %d, want %d", c.sync, c.every, c.grid, c.from, got, c.want)
		}
	}
}

// TestCheckpointGridSpacesLargeDenseParameters: the grid is AskGrid of
// training at the plan's throughput, spaced further where mirroring the
// dense parameters would take more than mirrorShare of a link, and 0 for
// a job without allreduce stages or a directory.
func TestCheckpointGridSpacesLargeDenseParameters(t *testing.T) {
	jf := &config.Job{Batch: 100, Steps: 1_000_000}
	jf.Checkpoint.Dir = "/ckpt"
	m, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	plan := &sched.Plan{Throughput: 10_000} // 100 steps a second
	all := []api.StageLayout{{FirstLayer: 0, LastLayer: len(m.Shapes()) - 1, DenseSync: api.DenseSyncAllreduce}}
	bytes := denseBytes(m, 0, len(m.Shapes())-1)
	mirrorSeconds := float64(3*bytes) / mirrorLinkBytesPerS / mirrorShare
	for _, c := range []struct {
		name   string
		grid   float64 // seconds
		layout []api.StageLayout
		dir    string
		want   int64
	}{
		{"2 s", 2 * mirrorSeconds, all, "/ckpt", int64(200 * mirrorSeconds)},
		{"short", mirrorSeconds / 10, all, "/ckpt", int64(100 * mirrorSeconds)},
		{"ps", 2, []api.StageLayout{{DenseSync: api.DenseSyncPS}}, "/ckpt", 0},
		{"no dir", 2, all, "", 0},
	} {
		jf.Checkpoint.Dir = c.dir
		got := checkpointGrid(jf, m, plan, c.layout, secondsOf(c.grid))
		if d := got - c.want; d < -1 || d > 1 {
			t.Errorf("%s: grid %d, want %d", c.name, got, c.want)
		}
	}
}

func secondsOf(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// TestAnAskIsMadeAgainAtALaterStep: a step asked again lies after the one
// asked before, even where the replicas have not moved since (a PS node
// takes only a later ask), and an ask of the last step is not made again.
func TestAnAskIsMadeAgainAtALaterStep(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	jf, _ := jobAndModel(t, strings.Replace(ctrJob, "steps = 12", "steps = 1000", 1))
	ps := &taskRun{task: api.Task{Role: api.RolePS, Steps: 1000}}
	j := &job{file: jf, state: api.JobRunning, tasks: []*taskRun{
		{task: api.Task{Role: api.RoleStage, Steps: 1000}, report: api.TaskReport{Step: 10}}, ps}}
	j.asked = &api.CheckpointAsked{}
	c.askAgain(j)
	first := j.asked.Step
	c.askedCheckpointFailed(j, first)
	if j.asked == nil || j.asked.Step <= first || ps.task.CheckpointAt != j.asked.Step || j.asked.Tries != 2 {
		t.Fatalf("asked at %d, then %+v (PS task at %d): want a later step, tried twice", first, j.asked, ps.task.CheckpointAt)
	}
	j.asked.Step = 1000
	c.askedCheckpointFailed(j, 1000)
	if j.asked != nil {
		t.Fatalf("the last step asked again: %+v", j.asked)
	}
}
