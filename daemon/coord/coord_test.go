package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// ctrJob is planned on the test catalog with the scheduler's own
// throughput floor: a GPU stage and a CPU stage, several units each.
const ctrJob = `version = 1
name = "ctr"
model = "ctrdnn"
data = "synthetic:1"
batch = 512
steps = 12
seed = 3
`

func TestRegisterHeartbeatAndReRegister(t *testing.T) {
	// The nodes below heartbeat by hand: keep them alive throughout.
	tc := startCluster(t, func(c *Config) { c.HeartbeatTimeout = patience })
	n := newFakeNode("cpu-a", "cpu", 2, 7001)
	n.req.GPUs = []api.GPU{{Name: "none", MemoryBytes: 0}}
	var r api.RegisterResponse
	tc.call("POST", "/v1/nodes/register", n.req, http.StatusOK, &r)
	if r.NodeID == "" {
		t.Fatal("no node id")
	}
	var hr api.HeartbeatResponse
	tc.call("POST", "/v1/nodes/"+r.NodeID+"/heartbeat", api.Heartbeat{}, http.StatusOK, &hr)
	if hr.Tasks == nil || len(hr.Tasks) != 0 {
		t.Errorf("idle node got tasks %v, want an empty list", hr.Tasks)
	}
	var nodes []api.NodeStatus
	tc.call("GET", "/v1/nodes", nil, http.StatusOK, &nodes)
	if len(nodes) != 1 || nodes[0].State != api.NodeAlive || nodes[0].Name != "cpu-a" || nodes[0].Units != 2 ||
		nodes[0].DataAddr != n.req.DataAddr || nodes[0].LastHeartbeat.Before(nodes[0].Registered) || len(nodes[0].GPUs) != 1 {
		t.Errorf("nodes: %+v", nodes)
	}
	tc.call("POST", "/v1/nodes/n999/heartbeat", api.Heartbeat{}, http.StatusNotFound, nil)

	// The daemon restarts and registers again: the old entry is dead.
	var again api.RegisterResponse
	tc.call("POST", "/v1/nodes/register", n.req, http.StatusOK, &again)
	if again.NodeID == r.NodeID {
		t.Fatalf("re-registration kept id %s", r.NodeID)
	}
	var e api.Error
	tc.call("POST", "/v1/nodes/"+r.NodeID+"/heartbeat", api.Heartbeat{}, http.StatusGone, &e)
	if !strings.Contains(e.Error, "registered again") {
		t.Errorf("old id: %q", e.Error)
	}
	tc.call("GET", "/v1/nodes", nil, http.StatusOK, &nodes)
	if len(nodes) != 2 || nodes[0].State != api.NodeDead || nodes[1].State != api.NodeAlive {
		t.Errorf("after re-registration: %+v", nodes)
	}
}

func TestRegisterRejectsUnknownType(t *testing.T) {
	tc := startCluster(t, nil)
	n := newFakeNode("tpu-a", "tpu", 1, 7001)
	var e api.Error
	tc.call("POST", "/v1/nodes/register", n.req, http.StatusBadRequest, &e)
	if !strings.Contains(e.Error, `type "tpu" is not in the catalog (have cpu, gpu)`) {
		t.Errorf("got %q", e.Error)
	}
}

// TestJobRunsToDone plans a job, places it on fake nodes and follows it to
// done: the tasks the nodes get must describe the plan, and the status must
// fold the nodes' reports.
func TestJobRunsToDone(t *testing.T) {
	tc := startCluster(t, nil)
	plan := tc.expectedPlan(ctrJob)
	nodes := tc.nodesFor(plan)
	id := tc.submit(ctrJob)
	s := tc.waitJob(id)
	if s.State != api.JobDone {
		t.Fatalf("job %s: %s (%s)", id, s.State, s.Reason)
	}
	var got sched.Plan
	if err := json.Unmarshal(s.Plan, &got); err != nil || got.Method != "exact" || len(got.Stages) != len(plan.Stages) {
		t.Fatalf("status plan %s (%v), want %d stages", s.Plan, err, len(plan.Stages))
	}
	var all []api.Task
	byNode := map[string]string{}
	for _, n := range nodes {
		received, _, _ := n.snapshot()
		for _, task := range received {
			all = append(all, task)
			byNode[task.TaskID] = n.req.Name
		}
	}
	checkTasks(t, plan, all, 512)
	if s.Step != 12 || s.Steps != 12 {
		t.Errorf("step %d of %d, want 12 of 12", s.Step, s.Steps)
	}
	if want := 1 / (1 + 12.0); math.Abs(s.Loss-want) > 1e-12 {
		t.Errorf("loss %g, want the last stage's %g", s.Loss, want)
	}
	checkStages(t, plan, s, all, byNode)
	if s.Started == nil || s.Finished == nil || s.Finished.Before(*s.Started) {
		t.Fatalf("started %v finished %v", s.Started, s.Finished)
	}
	hourly := 0.0
	for _, st := range plan.Stages {
		hourly += price(tc.cat, st.Type) * float64(st.Units)
	}
	hourly += price(tc.cat, plan.PSType) * float64(max(1, plan.PSCores))
	// The coordinator measures the duration on the monotonic clock, the
	// status carries wall-clock times: allow a microsecond's worth.
	if want := hourly * s.Finished.Sub(*s.Started).Hours(); s.CostSoFar <= 0 || math.Abs(s.CostSoFar-want) > hourly*time.Microsecond.Hours() {
		t.Errorf("cost so far %g, want %g", s.CostSoFar, want)
	}
	// Done: the tasks disappear from the nodes' replies.
	waitFor(t, "tasks stopped", func() bool {
		for _, n := range nodes {
			if _, current, _ := n.snapshot(); len(current) > 0 {
				return false
			}
		}
		return true
	})
	var jobs []api.JobStatus
	tc.call("GET", "/v1/jobs", nil, http.StatusOK, &jobs)
	if len(jobs) != 1 || jobs[0].ID != id || jobs[0].State != api.JobDone {
		t.Errorf("jobs: %+v", jobs)
	}
}

func price(cat *config.Catalog, typ string) float64 {
	ty, _ := cat.Type(typ)
	return ty.Price
}

// checkTasks checks the tasks of a job against its plan: one task per
// replica covering the stage's layers and units, the batch split over the
// replicas, peers wired stage to stage, and the same PS shards everywhere.
func checkTasks(t *testing.T, plan *sched.Plan, tasks []api.Task, batch int) {
	t.Helper()
	stages := make([][]api.Task, len(plan.Stages))
	var ps []api.Task
	for _, task := range tasks {
		if err := task.Validate(); err != nil {
			t.Errorf("invalid task: %v", err)
		}
		if _, err := config.ParseModel("sent", []byte(task.Model)); err != nil {
			t.Errorf("task %s: model text: %v", task.TaskID, err)
		}
		if task.Role == api.RolePS {
			ps = append(ps, task)
			continue
		}
		stages[task.Stage] = append(stages[task.Stage], task)
	}
	if want := max(1, plan.PSCores); len(ps) != want {
		t.Errorf("%d PS tasks, want %d", len(ps), want)
	}
	for i, reps := range stages {
		s := plan.Stages[i]
		slices.SortFunc(reps, func(a, b api.Task) int { return a.Replica - b.Replica })
		units, samples := 0, 0
		for k, task := range reps {
			if task.Replica != k || task.Replicas != len(reps) || task.DataShard != k || task.DataShards != len(reps) ||
				task.FirstLayer != s.First || task.LastLayer != s.Last || task.Steps != 12 || task.Mode != api.ModeBSP || task.Seed != 3 {
				t.Errorf("stage %d replica %d: %+v", i, k, task)
			}
			if !slices.Equal(task.PS, reps[0].PS) || len(task.PS) != len(ps) {
				t.Errorf("task %s: ps %v, want %d shards like %v", task.TaskID, task.PS, len(ps), reps[0].PS)
			}
			units += task.Units
			samples += task.Batch
		}
		if units != s.Units || samples != batch {
			t.Errorf("stage %d: %d units and batch %d over %d replicas, want %d and %d", i, units, samples, len(reps), s.Units, batch)
		}
		for _, task := range reps {
			if i+1 < len(stages) && len(task.Next) != len(stages[i+1]) || i+1 == len(stages) && len(task.Next) != 0 {
				t.Errorf("task %s: next %v, stage %d has %d replicas", task.TaskID, task.Next, i+1, len(stagesAt(stages, i+1)))
			}
			if i > 0 && len(task.Prev) != len(stages[i-1]) || i == 0 && len(task.Prev) != 0 {
				t.Errorf("task %s: prev %v", task.TaskID, task.Prev)
			}
		}
	}
}

func stagesAt(stages [][]api.Task, i int) []api.Task {
	if i < len(stages) {
		return stages[i]
	}
	return nil
}

// checkStages checks the status's stages against the plan and the fake
// nodes' last reports (Batch*10 samples/s per replica).
func checkStages(t *testing.T, plan *sched.Plan, s api.JobStatus, tasks []api.Task, byNode map[string]string) {
	t.Helper()
	if len(s.Stages) != len(plan.Stages) {
		t.Fatalf("%d stages, want %d", len(s.Stages), len(plan.Stages))
	}
	slowest := math.Inf(1)
	for i, st := range s.Stages {
		ps := plan.Stages[i]
		if st.Type != ps.Type || st.Units != ps.Units || st.FirstLayer != ps.First || st.LastLayer != ps.Last ||
			st.PredictedThroughput != ps.Throughput {
			t.Errorf("stage %d: %+v, plan %+v", i, st, ps)
		}
		measured := 0.0
		var nodes []string
		for _, task := range tasks {
			if task.Role == api.RoleStage && task.Stage == i {
				measured += float64(task.Batch) * 10
				nodes = append(nodes, byNode[task.TaskID])
			}
		}
		if st.MeasuredThroughput != measured || !sameSet(st.Nodes, nodes) {
			t.Errorf("stage %d: measured %g on %v, want %g on %v", i, st.MeasuredThroughput, st.Nodes, measured, nodes)
		}
		slowest = math.Min(slowest, measured)
	}
	if s.SamplesPerS != slowest {
		t.Errorf("job samples/s %g, want the slowest stage's %g", s.SamplesPerS, slowest)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestUnhostableJobWaitsForNodes: a job the live nodes cannot host yet
// but the catalog could waits, queued, with its reason and place, and
// starts once the nodes it needs register.
func TestUnhostableJobWaitsForNodes(t *testing.T) {
	tc := startCluster(t, nil)
	id := tc.submit(ctrJob)
	waitFor(t, "queued", func() bool { return tc.job(id).State == api.JobQueued })
	s := tc.job(id)
	if s.QueuePosition != 1 || !strings.Contains(s.Reason, "no live node offers free units") {
		t.Errorf("queued job: position %d, reason %q", s.QueuePosition, s.Reason)
	}
	tc.nodesFor(tc.expectedPlan(ctrJob))
	if s := tc.waitJob(id); s.State != api.JobDone {
		t.Fatalf("after the nodes joined: %s %q", s.State, s.Reason)
	}
}

// TestPlanUsesTheLiveNodes: with only CPU nodes registered, a job the
// catalog would plan on GPUs is planned on the CPU units that are there.
func TestPlanUsesTheLiveNodes(t *testing.T) {
	tc := startCluster(t, nil)
	if first := tc.expectedPlan(ctrJob).Stages[0]; first.Type == "cpu" {
		t.Fatalf("the catalog's plan already starts on cpu: the test needs another")
	}
	for i := range 2 {
		tc.start(newFakeNode(fmt.Sprintf("cpu-only-%d", i), "cpu", 4, 7100+i))
	}
	s := tc.waitJob(tc.submit(ctrJob))
	if s.State != api.JobDone {
		t.Fatalf("%s %q", s.State, s.Reason)
	}
	for _, st := range s.Stages {
		if st.Type != "cpu" {
			t.Errorf("stage %d planned on %s, which no live node offers", st.Stage, st.Type)
		}
	}
}

func TestInfeasiblePlanFails(t *testing.T) {
	tc := startCluster(t, nil)
	s := tc.waitJob(tc.submit(ctrJob + "throughput_limit = 1e12\n"))
	if s.State != api.JobFailed || !strings.HasPrefix(s.Reason, "no feasible plan (method exact) even with every unit of the catalog: ") {
		t.Errorf("got %s: %q", s.State, s.Reason)
	}
}

// TestDeadNodeFailsJob stops one node's heartbeats while its job runs: the
// job fails with the node's name, address and the timeout, and the other
// nodes' tasks disappear.
func TestDeadNodeFailsJob(t *testing.T) {
	tc := startCluster(t, nil)
	long := strings.Replace(ctrJob, "steps = 12", "steps = 1000000", 1)
	nodes := tc.nodesFor(tc.expectedPlan(long))
	id := tc.submit(long)
	victim := nodes[0]
	waitFor(t, "victim has a task", func() bool { _, current, _ := victim.snapshot(); return len(current) > 0 })
	waitFor(t, "job running", func() bool { return tc.job(id).Step > 0 })
	close(victim.stall)
	s := tc.waitJob(id)
	want := fmt.Sprintf("node %s (%s) missed heartbeats for %s", victim.req.Name, victim.req.DataAddr, timeout)
	if s.State != api.JobFailed || s.Reason != want {
		t.Fatalf("got %s: %q, want failed: %q", s.State, s.Reason, want)
	}
	victim.mu.Lock()
	silent := time.Since(victim.lastBeat)
	victim.mu.Unlock()
	if silent < timeout {
		t.Errorf("declared dead %s after the last heartbeat, before the %s timeout", silent, timeout)
	}
	var all []api.NodeStatus
	tc.call("GET", "/v1/nodes", nil, http.StatusOK, &all)
	for _, n := range all {
		if dead := n.Name == victim.req.Name; dead != (n.State == api.NodeDead) || dead && n.Reason != want {
			t.Errorf("node %s: %s %q", n.Name, n.State, n.Reason)
		}
	}
	waitFor(t, "survivors' tasks stopped", func() bool {
		for _, n := range nodes[1:] {
			if _, current, _ := n.snapshot(); len(current) > 0 {
				return false
			}
		}
		return true
	})
}

func TestTaskFailureFailsJob(t *testing.T) {
	tc := startCluster(t, nil)
	long := strings.Replace(ctrJob, "steps = 12", "steps = 1000000", 1)
	nodes := tc.nodesFor(tc.expectedPlan(long))
	nodes[0].failAt = 3 // set before any task arrives
	s := tc.waitJob(tc.submit(long))
	if s.State != api.JobFailed || !strings.Contains(s.Reason, "failed: out of memory") ||
		!strings.Contains(s.Reason, "on node "+nodes[0].req.Name+" ("+nodes[0].req.DataAddr+")") {
		t.Errorf("got %s: %q", s.State, s.Reason)
	}
}

func TestCancel(t *testing.T) {
	tc := startCluster(t, nil)
	long := strings.Replace(ctrJob, "steps = 12", "steps = 1000000", 1)
	nodes := tc.nodesFor(tc.expectedPlan(long))
	id := tc.submit(long)
	waitFor(t, "job running", func() bool { return tc.job(id).Step > 0 })
	var s api.JobStatus
	tc.call("DELETE", "/v1/jobs/"+id, nil, http.StatusOK, &s)
	if s.State != api.JobCancelled || s.Reason != "cancelled by the user" || s.Finished == nil {
		t.Errorf("after DELETE: %+v", s)
	}
	waitFor(t, "tasks stopped", func() bool {
		for _, n := range nodes {
			received, current, stopped := n.snapshot()
			if len(current) > 0 || len(stopped) != len(received) {
				return false
			}
		}
		return true
	})
	if got := tc.job(id); got.State != api.JobCancelled {
		t.Errorf("later: %s", got.State)
	}
	tc.call("DELETE", "/v1/jobs/"+id, nil, http.StatusConflict, nil)
	tc.call("DELETE", "/v1/jobs/j999", nil, http.StatusNotFound, nil)
	tc.call("GET", "/v1/jobs/j999", nil, http.StatusNotFound, nil)
}

// TestNodesFreedAfterJob runs two jobs one after the other on the same
// nodes: a finished job's nodes are free again.
func TestNodesFreedAfterJob(t *testing.T) {
	tc := startCluster(t, nil)
	tc.nodesFor(tc.expectedPlan(ctrJob))
	for range 2 {
		if s := tc.waitJob(tc.submit(ctrJob)); s.State != api.JobDone {
			t.Fatalf("%s: %s", s.State, s.Reason)
		}
	}
}

// TestBusyNodesAreNotShared submits a second job while the first holds
// its stage nodes: the second is planned on what is left (the PS node's
// idle units) or waits, queued, and never shares a stage node.
func TestBusyNodesAreNotShared(t *testing.T) {
	tc := startCluster(t, nil)
	long := strings.Replace(ctrJob, "steps = 12", "steps = 1000000", 1)
	tc.nodesFor(tc.expectedPlan(long))
	first := tc.submit(long)
	waitFor(t, "first running", func() bool { return tc.job(first).State == api.JobRunning })
	second := tc.submit(long)
	waitFor(t, "second placed or queued", func() bool {
		st := tc.job(second).State
		return st == api.JobRunning || st == api.JobQueued
	})
	s1, s2 := tc.job(first), tc.job(second)
	held := map[string]bool{}
	for _, st := range s1.Stages {
		for _, n := range st.Nodes {
			held[n] = true
		}
	}
	for _, st := range s2.Stages {
		for _, n := range st.Nodes {
			if held[n] {
				t.Errorf("both jobs have a stage on %s", n)
			}
		}
	}
	third := tc.submit(long)
	waitFor(t, "third queued", func() bool { return tc.job(third).State == api.JobQueued })
	if s := tc.job(third); s.Started != nil || s.QueuePosition < 1 {
		t.Errorf("third job while the cluster is full: %+v", s)
	}
	tc.call("DELETE", "/v1/jobs/"+first, nil, http.StatusOK, nil)
	waitFor(t, "third placed once the first ended", func() bool { return tc.job(third).State == api.JobRunning })
}

// TestPlainNeedsLoopbackNodes: without a cluster secret the data plane is
// plain, which only loopback nodes may use.
func TestPlainNeedsLoopbackNodes(t *testing.T) {
	tc := startCluster(t, nil)
	plan := tc.expectedPlan(ctrJob)
	for i, s := range plan.Stages {
		n := newFakeNode(fmt.Sprintf("r%d", i), s.Type, s.Units, 7000+i)
		n.req.DataAddr = fmt.Sprintf("10.1.2.3:%d", 7000+i)
		tc.start(n)
	}
	tc.start(newFakeNode("ps", firstCPUType(tc.cat), 1, 7100))
	s := tc.waitJob(tc.submit(ctrJob))
	if s.State != api.JobFailed || !strings.Contains(s.Reason, "(10.1.2.3:7000) is not on loopback") {
		t.Errorf("plain job on remote nodes: %s %q", s.State, s.Reason)
	}
}

// TestSecretGoesToTasks: with a cluster secret, remote nodes are fine and
// every task names the secret file; the job's mode and checkpoint settings
// reach every task too.
func TestSecretGoesToTasks(t *testing.T) {
	tc := startCluster(t, func(c *Config) {
		c.SecretFile = "/etc/heterps/secret"
		c.FinalCheckpointWait = 100 * time.Millisecond // fake nodes write no checkpoints
	})
	job := ctrJob + "mode = \"asp\"\n[checkpoint]\ndir = \"/var/ckpt\"\nevery = 5\n"
	plan := tc.expectedPlan(job)
	var nodes []*fakeNode
	for i, s := range plan.Stages {
		n := newFakeNode(fmt.Sprintf("r%d", i), s.Type, s.Units, 7000+i)
		n.req.DataAddr = fmt.Sprintf("10.1.2.3:%d", 7000+i)
		tc.start(n)
		nodes = append(nodes, n)
	}
	tc.start(newFakeNode("ps", firstCPUType(tc.cat), 1, 7100))
	if s := tc.waitJob(tc.submit(job)); s.State != api.JobDone {
		t.Fatalf("%s: %s", s.State, s.Reason)
	}
	tasks := receivedTasks(nodes, "")
	for _, task := range tasks {
		if task.SecretFile != "/etc/heterps/secret" || task.Plain || task.Mode != api.ModeASP ||
			task.CheckpointDir != "/var/ckpt" || task.CheckpointEvery != 5 {
			t.Errorf("task %s: secret %q plain %v mode %s checkpoint %q every %d", task.TaskID,
				task.SecretFile, task.Plain, task.Mode, task.CheckpointDir, task.CheckpointEvery)
		}
	}
	if len(tasks) == 0 {
		t.Error("the stage nodes received no tasks")
	}
}

// TestServeReturnsWhenTheListenerFails: Serve gives up, and stops its
// goroutines, when its listener cannot accept.
func TestServeReturnsWhenTheListenerFails(t *testing.T) {
	defer goleak.VerifyNone(t)
	c, err := New(Config{Catalog: loadTestCatalog(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	done := make(chan error, 1)
	go func() { done <- c.Serve(context.Background(), ln) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Serve on a closed listener returned nil")
		}
	case <-time.After(patience):
		t.Fatal("Serve did not return")
	}
}

func TestNewNeedsAValidCatalog(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("no catalog accepted")
	}
	if _, err := New(Config{Catalog: &config.Catalog{}}); err == nil {
		t.Error("empty catalog accepted")
	}
}

// TestFinalCheckpointWait: a checkpointing job whose stages are done but
// whose PS never reports the last step's checkpoint stays running for
// FinalCheckpointWait, its status saying until when, then ends done with
// the reason; its status shows no checkpoint.
func TestFinalCheckpointWait(t *testing.T) {
	const wait = 300 * time.Millisecond
	tc := startCluster(t, func(c *Config) { c.FinalCheckpointWait = wait })
	job := ctrJob + fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", t.TempDir())
	tc.nodesFor(tc.expectedPlan(job))
	id := tc.submit(job)
	if s := tc.job(id); s.FinalCheckpointBy != nil {
		t.Errorf("before training: waits for its last checkpoint until %s", s.FinalCheckpointBy)
	}
	waitFor(t, "stages done", func() bool { s := tc.job(id); return s.Step == s.Steps })
	trained := time.Now()
	if s := tc.job(id); s.State == api.JobRunning && (s.FinalCheckpointBy == nil || s.FinalCheckpointBy.Sub(trained) > wait) {
		t.Errorf("trained, waiting: final checkpoint by %v, want within %s of %s", s.FinalCheckpointBy, wait, trained)
	}
	s := tc.waitJob(id)
	if s.FinalCheckpointBy != nil {
		t.Errorf("done: still waits for its last checkpoint until %s", s.FinalCheckpointBy)
	}
	if s.State != api.JobDone || !strings.Contains(s.Reason, "checkpoint of step 12") {
		t.Fatalf("job %s: %q, want done without the last checkpoint", s.State, s.Reason)
	}
	if waited := time.Since(trained); waited < wait/2 {
		t.Errorf("done %s after training, want about %s", waited, wait)
	}
	if s.Checkpoint != nil {
		t.Errorf("status shows checkpoint %+v, none was reported", s.Checkpoint)
	}
}

// TestAFailingLastCheckpointIsWaitedForLonger: while a PS node reports
// that it cannot write the last step's checkpoint (and keeps trying), the
// job waits FinalCheckpointFailWait for it instead of
// FinalCheckpointWait, shows the failure, then ends done naming it.
func TestAFailingLastCheckpointIsWaitedForLonger(t *testing.T) {
	const wait, failWait = 100 * time.Millisecond, 800 * time.Millisecond
	tc := startCluster(t, func(c *Config) { c.FinalCheckpointWait, c.FinalCheckpointFailWait = wait, failWait })
	job := ctrJob + fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", t.TempDir())
	for _, n := range tc.nodesFor(tc.expectedPlan(job)) {
		n.mu.Lock()
		n.report = func(task api.Task, r *api.TaskReport) {
			r.State = api.TaskRunning
			if task.Role == api.RolePS {
				r.CheckpointFailure, r.CheckpointFailures = &api.CheckpointFailure{Step: 12, Error: "no space left on device"}, 1
				return
			}
			if r.Step = min(task.Steps, r.Step+1); r.Step == task.Steps {
				r.State = api.TaskDone
			}
		}
		n.mu.Unlock()
	}
	id := tc.submit(job)
	waitFor(t, "stages done", func() bool { s := tc.job(id); return s.Step == s.Steps })
	trained := time.Now()
	time.Sleep(2 * wait)
	s := tc.job(id)
	if s.State != api.JobRunning || s.CheckpointFailure == nil || s.CheckpointFailure.Step != 12 || s.CheckpointFailures < 1 {
		t.Fatalf("past FinalCheckpointWait: %s (%q), failure %+v, %d failures; want it running, showing the failure",
			s.State, s.Reason, s.CheckpointFailure, s.CheckpointFailures)
	}
	if by := s.FinalCheckpointBy; by == nil || by.Before(trained.Add(failWait-wait)) || by.After(time.Now().Add(failWait)) {
		t.Errorf("failing: final checkpoint by %v, want about %s after %s", by, failWait, trained)
	}
	s = tc.waitJob(id)
	if s.State != api.JobDone || !strings.Contains(s.Reason, "checkpoint of step 12 could not be written within 800ms") ||
		!strings.Contains(s.Reason, "no space left on device") {
		t.Fatalf("job %s: %q", s.State, s.Reason)
	}
	if waited := time.Since(trained); waited < failWait/2 {
		t.Errorf("done %s after training, want about %s", waited, failWait)
	}
}

// TestTasksCarryTheJobsMicroBatches: micro_batches, schedule and the
// 1F1B lookahead (the job file's, else the default) reach every stage
// task.
func TestTasksCarryTheJobsMicroBatches(t *testing.T) {
	for _, tc := range []struct {
		lines, schedule string
		lookahead       int
	}{
		{"schedule = \"fill-drain\"", "fill-drain", 0},
		{"lookahead = 2", "1f1b", 2},
		{"", "1f1b", config.DefaultLookahead},
	} {
		t.Run(tc.schedule+fmt.Sprint(tc.lookahead), func(t *testing.T) {
			cl := startCluster(t, nil)
			job := strings.Replace(ctrJob, "steps = 12", "steps = 12\nmicro_batches = 4\n"+tc.lines, 1)
			nodes := cl.nodesFor(cl.expectedPlan(job))
			if s := cl.waitJob(cl.submit(job)); s.State != api.JobDone {
				t.Fatalf("job %s: %s", s.State, s.Reason)
			}
			stages := receivedTasks(nodes, api.RoleStage)
			for _, task := range stages {
				if task.MicroBatches != 4 || task.Schedule != tc.schedule || task.Lookahead != tc.lookahead {
					t.Errorf("task %s: %d micro-batches, schedule %q, lookahead %d; want 4, %s, %d",
						task.TaskID, task.MicroBatches, task.Schedule, task.Lookahead, tc.schedule, tc.lookahead)
				}
			}
			if len(stages) == 0 {
				t.Fatal("no stage tasks")
			}
		})
	}
}

// TestTowerModelsArePlannedAsOneStage: a model with towers runs only as a
// whole, so its plan is one stage over every layer, whatever the catalog.
func TestTowerModelsArePlannedAsOneStage(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"matchnet", "ctrdnn"} {
		jf, err := config.ParseJob("job.toml", fmt.Appendf(nil, "version = 1\nmodel = %q\ndata = \"synthetic\"\nbatch = 64\nsteps = 10\n", model))
		if err != nil {
			t.Fatal(err)
		}
		j := &job{file: jf}
		if err := c.check(j); err != nil {
			t.Fatal(err)
		}
		plan, err := c.plan(context.Background(), j, c.cfg.Catalog)
		if err != nil || !plan.Feasible {
			t.Fatalf("%s: plan %+v, %v", model, plan, err)
		}
		layers := len(j.model.Shapes())
		if model == "matchnet" && (len(plan.Stages) != 1 || plan.Stages[0].First != 0 || plan.Stages[0].Last != layers-1) {
			t.Errorf("matchnet planned as %+v, want one stage over layers 0-%d", plan.Stages, layers-1)
		}
		if last := plan.Stages[len(plan.Stages)-1].Last; last != layers-1 {
			t.Errorf("%s: the plan ends at layer %d of %d", model, last, layers)
		}
	}
}

// TestRegisterRefusesASecondNodeOfOneName: a daemon at another address
// under a live node's name is refused with 409 naming the first's address
// (before, each registration evicted the other); the live node is kept.
// Ids lead with the node's name.
func TestRegisterRefusesASecondNodeOfOneName(t *testing.T) {
	tc := startCluster(t, func(c *Config) { c.HeartbeatTimeout = patience })
	first := newFakeNode("n2", "cpu", 1, 7001)
	var r api.RegisterResponse
	tc.call("POST", "/v1/nodes/register", first.req, http.StatusOK, &r)
	if !strings.HasPrefix(r.NodeID, "n2~") {
		t.Errorf("node n2 got id %q, want one that starts with its name", r.NodeID)
	}
	second := newFakeNode("n2", "cpu", 1, 7002)
	var e api.Error
	tc.call("POST", "/v1/nodes/register", second.req, http.StatusConflict, &e)
	if !strings.Contains(e.Error, "127.0.0.1:7001") || !strings.Contains(e.Error, "another name") {
		t.Errorf("409 says %q; want the first node's address", e.Error)
	}
	tc.call("POST", "/v1/nodes/"+r.NodeID+"/heartbeat", api.Heartbeat{}, http.StatusOK, nil)
}
