package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
)

// startAgent runs a node's listeners without a coordinator: the test hands
// it tasks through reconcile and updateTask. The cleanup stops its tasks
// and listeners.
func startAgent(t *testing.T, name string) (*Agent, context.Context) {
	t.Helper()
	a, err := New(Config{Name: name, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0", Type: "cpu", Units: 1,
		Plain: true, Logger: quiet, ReadyTimeout: patience, StepTimeout: patience})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.ps.serve(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		a.wg.Wait()
		<-done
		a.ps.close()
		a.transport.Close()
	})
	return a, ctx
}

// waitReport polls a's report of task until ok holds, or fails the test.
func waitReport(t *testing.T, a *Agent, task string, ok func(api.TaskReport) bool) api.TaskReport {
	t.Helper()
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		for _, r := range a.reports() {
			if r.TaskID == task && ok(r) {
				return r
			}
			if r.TaskID == task && r.State == api.TaskFailed {
				t.Fatalf("task %s failed: %s", task, r.Error)
			}
		}
		time.Sleep(interval)
	}
	t.Fatalf("task %s: no report as wanted after %v", task, patience)
	return api.TaskReport{}
}

func hasCheckpoint(step int64) func(api.TaskReport) bool {
	return func(r api.TaskReport) bool {
		return slices.ContainsFunc(r.Checkpoints, func(c api.ShardCheckpoint) bool { return c.Step == step })
	}
}

// An in-process job of two nodes, one data-parallel replica each (batches
// 24 and 40), drops replica 1 from step k+1 on through updateTask: its
// node's replica stops after step k, the PS shard waits for replica 0
// alone, which takes the whole batch of 64 from where the stage's data had
// got to. The job's final parameters equal, bit for bit, those of a job of
// one replica restored from the first job's checkpoint at step k, batch 64,
// reading the data from that same record.
func TestUpdateTaskDropsAReplica(t *testing.T) {
	const k, steps = 4, 8
	model, err := os.ReadFile("testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	nodeA, ctxA := startAgent(t, "a")
	nodeB, ctxB := startAgent(t, "b")
	dir := t.TempDir()
	base := api.Task{JobID: "elastic", Model: string(model), Data: "synthetic:1", Steps: steps, Seed: 3,
		Mode: api.ModeBSP, Plain: true, Layout: []api.StageLayout{{FirstLayer: 0, LastLayer: 3, Replicas: 2}},
		PS: []string{nodeA.psAddr}, CheckpointDir: dir, CheckpointEvery: k, Batches: []int{24, 40}}
	psTask := base
	psTask.TaskID, psTask.Role = "elastic-ps0", api.RolePS
	stage := func(r int) api.Task {
		s := base
		s.TaskID, s.Role, s.Replica, s.Replicas, s.Units, s.LastLayer = fmt.Sprintf("elastic-s0r%d", r), api.RoleStage, r, 2, 1, 3
		s.DataShard, s.DataShards, s.Batch = r, 2, base.Batches[r]
		return s
	}
	nodeA.reconcile(ctxA, []api.Task{psTask, stage(0)})
	nodeB.reconcile(ctxB, []api.Task{stage(1)})
	update := func(a *Agent, s api.Task) {
		s.Generation, s.FromStep, s.Members, s.Batches = 1, k+1, []int{0}, []int{64}
		a.mu.Lock()
		tk := a.tasks[s.TaskID]
		a.mu.Unlock()
		if err := a.updateTask(tk, s); err != nil {
			t.Fatal(err)
		}
	}
	update(nodeA, psTask)
	update(nodeB, stage(1))
	update(nodeA, stage(0))

	if r := waitReport(t, nodeB, "elastic-s0r1", func(r api.TaskReport) bool { return r.State == api.TaskDone }); r.Step != k {
		t.Errorf("the dropped replica stopped after step %d, want %d", r.Step, k)
	}
	waitReport(t, nodeA, "elastic-s0r0", func(r api.TaskReport) bool { return r.State == api.TaskDone && r.Step == steps })
	waitReport(t, nodeA, psTask.TaskID, hasCheckpoint(steps))

	// The reference: one replica from step k, from the stage's data position.
	opts := data.Options{Shards: 2, Split: data.SplitTrain}
	p0, _ := opts.After(k * 24)
	opts.Shard = 1
	p1, _ := opts.After(k * 40)
	nodeC, ctxC := startAgent(t, "c")
	refDir := t.TempDir()
	ref := base
	ref.JobID, ref.PS, ref.Layout, ref.Batches = "reference", []string{nodeC.psAddr}, []api.StageLayout{{FirstLayer: 0, LastLayer: 3, Replicas: 1}}, nil
	ref.CheckpointDir, ref.RestoreDir, ref.FirstStep = refDir, ckpt.StepDir(dir, k), k
	refPS := ref
	refPS.TaskID, refPS.Role = "reference-ps0", api.RolePS
	refStage := ref
	refStage.TaskID, refStage.Role, refStage.Replicas, refStage.Units, refStage.LastLayer = "reference-s0r0", api.RoleStage, 1, 1, 3
	refStage.DataShards, refStage.Batch = 1, 64
	refStage.Generation, refStage.FromStep, refStage.Members, refStage.Batches, refStage.DataStart = 1, k+1, []int{0}, []int{64}, max(p0, p1)
	nodeC.reconcile(ctxC, []api.Task{refPS, refStage})
	waitReport(t, nodeC, refPS.TaskID, hasCheckpoint(steps))

	name := ps.FileName(0, 1)
	sameTensors(t, filepath.Join(ckpt.StepDir(dir, steps), name), filepath.Join(ckpt.StepDir(refDir, steps), name))
}

// An exact change (a grow's) that reaches a task after its step — the
// shard has applied it, the replica has read its input — fails neither:
// each reports it late and goes on as it was, and the job trains to its
// end on its old replica.
func TestALateExactChangeFailsNoTask(t *testing.T) {
	const steps = 400
	model, err := os.ReadFile("testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	a, ctx := startAgent(t, "a")
	base := api.Task{JobID: "late", Model: string(model), Data: "synthetic:1", Steps: steps, Seed: 3, Mode: api.ModeBSP, Plain: true,
		Layout: []api.StageLayout{{FirstLayer: 0, LastLayer: 3, Replicas: 1}}, PS: []string{a.psAddr}}
	psTask := base
	psTask.TaskID, psTask.Role = "late-ps0", api.RolePS
	stage := base
	stage.TaskID, stage.Role, stage.Replicas, stage.Units, stage.LastLayer, stage.DataShards, stage.Batch = "late-s0r0", api.RoleStage, 1, 1, 3, 1, 64
	a.reconcile(ctx, []api.Task{psTask, stage})
	waitReport(t, a, stage.TaskID, func(r api.TaskReport) bool { return r.Step >= 20 })
	grow := func(s api.Task) api.Task {
		s.Generation, s.FromStep, s.Members, s.Batches, s.DataStart = 1, 2, []int{0, 1}, []int{32, 32}, 1000
		return s
	}
	a.reconcile(ctx, []api.Task{grow(psTask), grow(stage)})
	for _, id := range []string{psTask.TaskID, stage.TaskID} {
		if r := waitReport(t, a, id, func(r api.TaskReport) bool { return r.Late == 1 || r.State == api.TaskFailed }); r.State == api.TaskFailed {
			t.Fatalf("%s failed on a late exact change: %s", id, r.Error)
		}
	}
	if r := waitReport(t, a, stage.TaskID, func(r api.TaskReport) bool { return r.State != api.TaskRunning }); r.State != api.TaskDone || r.Step != steps {
		t.Errorf("the replica ended %s at step %d (%s), want done at %d", r.State, r.Step, r.Error, steps)
	}
}

// A new membership for a running task is refused unless it is the same
// task of the same job, from a step >= 1, with members and, for a stage,
// a batch for each member.
func TestCheckElasticRefusesASpecThatCannotReplaceTheRunningOne(t *testing.T) {
	old := api.Task{TaskID: "j1.s0.r0", JobID: "j1", Role: api.RoleStage}
	spec := func(change func(*api.Task)) api.Task {
		s := old
		s.FromStep, s.Members, s.Batches = 10, []int{0, 1}, []int{256, 256}
		change(&s)
		return s
	}
	for _, tc := range []struct {
		name string
		spec api.Task
		want string // "" for accepted
	}{
		{"a resize", spec(func(*api.Task) {}), ""},
		{"another task", spec(func(s *api.Task) { s.TaskID = "j1.s0.r1" }), "cannot become task j1.s0.r1"},
		{"another job", spec(func(s *api.Task) { s.JobID = "j2" }), "cannot become task j1.s0.r0 of job j2"},
		{"another role", spec(func(s *api.Task) { s.Role = api.RolePS }), "(ps)"},
		{"from step 0", spec(func(s *api.Task) { s.FromStep = 0 }), "from_step 0, want >= 1"},
		{"no members", spec(func(s *api.Task) { s.Members, s.Batches = nil, nil }), "members: empty"},
		{"a batch short", spec(func(s *api.Task) { s.Batches = []int{512} }), "1 batches for 2 members"},
	} {
		err := checkElastic(old, tc.spec)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
