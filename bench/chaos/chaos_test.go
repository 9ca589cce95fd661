package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
)

func TestResumedNeedsAStepPastTheFault(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	samples := []sample{
		{at(0), api.JobStatus{ID: "j1", Step: 50}}, // before the fault, past its step: does not count
		{at(2), api.JobStatus{ID: "j1", Step: 40}},
		{at(3), api.JobStatus{ID: "j2", Step: 30, RestoredFrom: &api.CheckpointStatus{Step: 30}}},
		{at(4), api.JobStatus{ID: "j2", Step: 31, RestoredFrom: &api.CheckpointStatus{Step: 30}}},
	}
	got, ok := resumed(samples, "j1", at(1), 40)
	if !ok || !got.at.Equal(at(4)) {
		t.Errorf("resumed = %v, %v; want the restarted job's first step past its checkpoint, at %v", got.at, ok, at(4))
	}
	got, ok = resumed(samples[:2], "j1", at(1), 39)
	if !ok || !got.at.Equal(at(2)) {
		t.Errorf("resumed = %v, %v; want the same job's step past the fault's, at %v", got.at, ok, at(2))
	}
	if _, ok := resumed(samples[:3], "j1", at(1), 40); ok {
		t.Error("resumed with no step past the fault's")
	}
}

func TestVictim(t *testing.T) {
	s := api.JobStatus{ID: "j1", PS: []string{"n0"}, Stages: []api.StageStatus{{Nodes: []string{"n0", "n1", "n2"}}}}
	if v, err := victim(s, true); err != nil || v != "n0" {
		t.Errorf("PS victim = %q, %v; want n0", v, err)
	}
	if v, err := victim(s, false); err != nil || v != "n1" {
		t.Errorf("stage victim = %q, %v; want n1, the first stage node without a shard", v, err)
	}
	s.PS = []string{"n0", "n1", "n2"}
	if _, err := victim(s, false); err == nil {
		t.Error("no error when every stage node holds a shard")
	}
}

// writeShard writes a PS-like shard file with table "emb" (rows ids, one
// optimiser state) and block "fc".
func writeShard(t *testing.T, path, job string, ids []int64, rows, state, block []float32) {
	t.Helper()
	meta := ckpt.NewMetadata("m", 10)
	meta["heterps.ps.job"] = job
	n := int64(len(ids))
	_, err := ckpt.WriteFile(path, meta, []ckpt.Tensor{
		ckpt.Int64("emb.ids", []int64{n}, ids),
		ckpt.Float32("emb", []int64{n, 2}, rows),
		ckpt.Float32("emb.opt0", []int64{n, 2}, state),
		ckpt.Float32("fc", []int64{int64(len(block))}, block),
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestValuesDigestIgnoresRowOrderAndJob(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	writeShard(t, a, "j1", []int64{7, 3}, []float32{1, 2, 3, 4}, []float32{5, 6, 7, 8}, []float32{9})
	writeShard(t, b, "j2", []int64{3, 7}, []float32{3, 4, 1, 2}, []float32{7, 8, 5, 6}, []float32{9})
	writeShard(t, c, "j1", []int64{3, 7}, []float32{3, 4, 1, 2}, []float32{7, 8, 5, 0}, []float32{9})
	da, err := valuesDigest([]string{a})
	if err != nil {
		t.Fatal(err)
	}
	db, _ := valuesDigest([]string{b})
	dc, _ := valuesDigest([]string{c})
	if da != db {
		t.Error("the same rows in another order, written by another job, digest differently")
	}
	if da == dc {
		t.Error("a different optimiser state digests the same")
	}
}

func TestIdentical(t *testing.T) {
	ref := ckptDigest{step: 10, files: map[string]string{"s": "aa"}, values: "v"}
	cases := []struct {
		got  ckptDigest
		want string
	}{
		{ckptDigest{step: 10, files: map[string]string{"s": "aa"}, values: "v"}, "yes (files)"},
		{ckptDigest{step: 10, files: map[string]string{"s": "bb"}, values: "v"}, "yes (values)"},
		{ckptDigest{step: 10, files: map[string]string{"s": "bb"}, values: "w"}, "no"},
		{ckptDigest{step: 9, files: map[string]string{"s": "aa"}, values: "v"}, "no (step 9 vs 10)"},
		{ckptDigest{}, "n/a"},
	}
	for _, c := range cases {
		if got := identical(ref, c.got); got != c.want {
			t.Errorf("identical(%+v) = %q, want %q", c.got, got, c.want)
		}
	}
}

func TestFenced(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := api.JobStatus{ID: "j1", Generation: 1, Stages: []api.StageStatus{{Nodes: []string{"n0", "n1"}}}}
	moved := at
	moved.Generation = 2
	samples := []sample{{t0.Add(time.Second), at}, {t0.Add(2 * time.Second), moved}}
	if got, ok := fenced(samples, at, "n1", t0); !ok || !got.Equal(t0.Add(2*time.Second)) {
		t.Errorf("fenced = %v, %v; want the sample with the new generation", got, ok)
	}
	if _, ok := fenced(samples[:1], at, "n1", t0); ok {
		t.Error("fenced while the job still ran on the node")
	}
}

func TestLoggedWritesAfter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n0.log")
	log := strings.Join([]string{
		`time=2026-12-01T00:00:01.000Z level=INFO msg="ps: checkpoint files written" node=n0 job=j1 step=100`,
		`time=2026-12-01T00:00:05.000Z level=INFO msg="task stopped" node=n0`,
		`time=2026-12-01T00:00:06.000Z level=INFO msg="ps: checkpoint files written" node=n0 job=j1 step=200`,
	}, "\n")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	fence := time.Date(2026, 12, 1, 0, 0, 3, 0, time.UTC)
	got, err := loggedWritesAfter(path, fence)
	if err != nil || len(got) != 1 || !strings.Contains(got[0], "step=200") {
		t.Errorf("loggedWritesAfter = %q, %v; want the step-200 line only", got, err)
	}
}

func TestOldJobFilesAfter(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "step-0000000010")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeShard(t, filepath.Join(dir, "old.safetensors"), "j1", []int64{1}, []float32{1, 2}, []float32{3, 4}, []float32{5})
	writeShard(t, filepath.Join(dir, "new.safetensors"), "j2", []int64{1}, []float32{1, 2}, []float32{3, 4}, []float32{5})
	got, err := oldJobFilesAfter(root, "j1", time.Now().Add(-time.Hour))
	if err != nil || len(got) != 1 || !strings.HasSuffix(got[0], "old.safetensors") {
		t.Errorf("oldJobFilesAfter = %q, %v; want the old job's file only", got, err)
	}
	if got, _ := oldJobFilesAfter(root, "j1", time.Now().Add(time.Hour)); len(got) != 0 {
		t.Errorf("files from before the fence listed: %q", got)
	}
}

func TestQueuedForCountsTheUnbrokenWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := &watcher{samples: []sample{
		{t0, api.JobStatus{ID: "j2", State: api.JobQueued}},
		{t0.Add(time.Second), api.JobStatus{ID: "j2", State: api.JobRunning}},
		{t0.Add(2 * time.Second), api.JobStatus{ID: "j2", State: api.JobQueued}},
		{t0.Add(5 * time.Second), api.JobStatus{ID: "j2", State: api.JobQueued}},
	}}
	if got := w.queuedFor("j2"); got != 3*time.Second {
		t.Errorf("queuedFor = %v, want 3s (since it was queued again)", got)
	}
	if got := w.queuedFor("j1"); got != 0 {
		t.Errorf("queuedFor of another job = %v, want 0", got)
	}
}

func TestStalledAtTakesTheHighestStepSoonAfterTheFault(t *testing.T) {
	t0 := time.Unix(1000, 0)
	samples := []sample{
		{t0.Add(-time.Second), api.JobStatus{ID: "j1", Step: 90}},
		{t0.Add(time.Second), api.JobStatus{ID: "j1", Step: 140}}, // the report the fault's step lagged
		{t0.Add(time.Second), api.JobStatus{ID: "j2", Step: 500}},
		{t0.Add(5 * time.Second), api.JobStatus{ID: "j1", Step: 141}}, // progress after the recovery
	}
	if got := stalledAt(samples, "j1", t0, 100, 2*time.Second); got != 140 {
		t.Errorf("stalledAt = %d, want 140", got)
	}
}

func TestRegenerated(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := api.JobStatus{ID: "j1", Generation: 1}
	samples := []sample{
		{t0.Add(time.Second), api.JobStatus{ID: "j1", Generation: 1}},
		{t0.Add(3 * time.Second), api.JobStatus{ID: "j1", Generation: 2}},
	}
	if got, ok := regenerated(samples, at, t0); !ok || !got.Equal(t0.Add(3*time.Second)) {
		t.Errorf("regenerated = %v, %v; want the first sample of generation 2", got, ok)
	}
	if _, ok := regenerated(samples[:1], at, t0); ok {
		t.Error("regenerated without a newer generation")
	}
}

// The job file asks for the dense sync of --dense-sync, and an unknown one
// is refused.
func TestDenseSyncFlag(t *testing.T) {
	o := options{steps: 1500, batch: 256, every: 100, faultAt: 0.4, overheadRuns: 1, overheadSteps: 6000, denseSync: "allreduce"}
	if err := parseScenarios(&o, "none"); err != nil {
		t.Fatal(err)
	}
	b := &bench{o: o}
	job, err := config.ParseJob("chaos.toml", b.jobTOML("/tmp/ck", 100, 1500))
	if err != nil || job.DenseSync != config.DenseSyncAllreduce {
		t.Fatalf("job file: %+v (%v), want dense_sync allreduce", job, err)
	}
	o.denseSync = "nccl"
	if err := parseScenarios(&o, "none"); err == nil || !strings.Contains(err.Error(), "--dense-sync") {
		t.Fatalf("--dense-sync nccl: %v", err)
	}
}

// The grow keeps the replicas, adds one on the spare node, and splits the
// batch evenly, the remainder to the first.
func TestEvenGrow(t *testing.T) {
	s := api.JobStatus{Stages: []api.StageStatus{{Nodes: []string{"n1", "n0", "n2"}, Replicas: []int{2, 0, 1}, Batches: []int{86, 85, 85}}}}
	req := evenGrow(s, "n3", 258)
	if !slices.Equal(req.Replicas, []int{0, 1, 2}) || !slices.Equal(req.Batches, []int{65, 65, 64}) ||
		len(req.Add) != 1 || req.Add[0] != (api.NewReplica{Node: "n3", Batch: 64}) {
		t.Errorf("evenGrow = %+v", req)
	}
	if err := req.Validate(); err != nil {
		t.Error(err)
	}
}

// Steps trained twice: none without a restart, the steps from the
// checkpoint to the one shown at the fault with one, and none when the
// checkpoint is past that lagging step.
func TestTrainedTwice(t *testing.T) {
	at := api.JobStatus{ID: "j1", Step: 691}
	for _, tc := range []struct {
		final api.JobStatus
		want  int64
	}{
		{api.JobStatus{ID: "j1"}, 0},
		{api.JobStatus{ID: "j2", RestoredFrom: &api.CheckpointStatus{Step: 600}}, 91},
		{api.JobStatus{ID: "j2", RestoredFrom: &api.CheckpointStatus{Step: 700}}, 0},
	} {
		r := &result{}
		if trainedTwice(r, at, tc.final); r.twice != tc.want {
			t.Errorf("restored from %+v: %d trained twice, want %d", tc.final.RestoredFrom, r.twice, tc.want)
		}
	}
}

// TestHandedOverReadsTheRestartedCoordinatorsLog: the grow-coordinator
// scenario says whether the spare node's task was handed over by the
// restarted coordinator or adopted from the node.
func TestHandedOverReadsTheRestartedCoordinatorsLog(t *testing.T) {
	dir := t.TempDir()
	handed := filepath.Join(dir, "handed.log")
	adopted := filepath.Join(dir, "adopted.log")
	os.WriteFile(handed, []byte(`time=x level=INFO msg="handing over tasks the node never got" job=j1 node=n3 previous=n3~4 tasks=[j1.s0.r3]`+"\n"), 0o600)
	os.WriteFile(adopted, []byte(`time=x level=INFO msg="node registered" node=n3 node_id=n3~8 adopted=1`+"\n"), 0o600)
	if got := handedOver(handed, "n3"); !strings.Contains(got, "handed it over") {
		t.Errorf("handed: %q", got)
	}
	if got := handedOver(adopted, "n3"); !strings.Contains(got, "adopted it") {
		t.Errorf("adopted: %q", got)
	}
	if got := handedOver(handed, "n2"); !strings.Contains(got, "adopted it") {
		t.Errorf("another node's handover counted for n2: %q", got)
	}
}

// TestEveryScenarioRuns: each scenario but the overhead one has a fault
// (none's is nil), and the coordinator's stop falls between a heartbeat
// timeout and the lease its nodes get there.
func TestEveryScenarioRuns(t *testing.T) {
	for _, name := range allScenarios {
		if _, ok := faults[name]; !ok && name != "overhead" {
			t.Errorf("scenario %s has no fault", name)
		}
	}
	stop, lease := defaultCoordStop, leaseOf("sigstop-coordinator")
	if timeout := 3 * loopback.Heartbeat; stop <= timeout || stop >= lease {
		t.Errorf("sigstop-coordinator: a %v stop against a %v heartbeat timeout and a %v lease", stop, timeout, lease)
	}
	if stop, lease := defaultCoordLongStop, leaseOf("sigstop-coordinator-long"); stop <= lease+loopback.Heartbeat {
		t.Errorf("sigstop-coordinator-long: a %v stop against a %v lease", stop, lease)
	}
}

// TestTargetsJudgeEachScenario: a lossless scenario is met only with no
// restart and no step trained twice; the long coordinator stop only with a
// restart that ends on the undisturbed values.
func TestTargetsJudgeEachScenario(t *testing.T) {
	var out strings.Builder
	printTargets(&out, []*result{
		{name: "sigstop-coordinator", recovery: 4 * time.Second},
		{name: "grow", recovery: 4 * time.Second, restarts: 1, twice: 30},
		{name: "sigstop-coordinator-long", recovery: 9 * time.Second, restarts: 1, twice: 40, identical: "yes (values)"},
	})
	for _, want := range []string{
		"0 steps lost when the coordinator stops within the nodes' lease: met (0 trained twice, 0 restarts)",
		"0 steps lost growing a stage onto a node in place: MISSED (30 trained twice, 1 restarts)",
		"a coordinator stopped past the lease: the job fails over to a checkpoint and ends on the undisturbed values: met (1 restarts, yes (values))",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}
}
