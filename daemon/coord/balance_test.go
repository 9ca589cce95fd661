package coord

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
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

// TestAnAdoptedJobKeepsItsBatching: a running job taken up from the state
// database by a restarted coordinator gets its batching back once every
// stage task is adopted — a dynamic controller again, the counts of its
// record, the batches its tasks run — and none before, so nothing resizes
// a job half bound. Its record also keeps the batches a job restarting to
// resize them restarts with; a record with bad counts is refused.
func TestAnAdoptedJobKeepsItsBatching(t *testing.T) {
	src := strings.Replace(ctrJob, "steps = 12", "steps = 100000", 1) + "[batching]\nmode = \"dynamic\"\n"
	jf, model := jobAndModel(t, src)
	plan := &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 2, Last: len(model.Shapes()) - 1}}, PSType: "cpu"}
	planJSON, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*node{}
	for _, name := range []string{"a", "b"} {
		nodes[name] = &node{id: name + "~1", req: api.RegisterRequest{Name: name, Type: "cpu", Units: 1}, kind: config.KindCPU, state: api.NodeAlive}
	}
	j := &job{id: "j1", source: src, file: jf, model: model, state: api.JobRunning, gen: 3, plan: plan, planJSON: planJSON}
	for k, name := range []string{"a", "b"} {
		j.tasks = append(j.tasks, &taskRun{job: j, node: nodes[name], nodeName: name,
			task: api.Task{TaskID: fmt.Sprintf("j1.s0.r%d", k), JobID: "j1", Role: api.RoleStage, Replica: k, Replicas: 2, Units: 1, Batch: []int{300, 212}[k]}})
	}
	pl, _ := placementOfTasks(j)
	j.balance = newBalance(j, pl, nil)
	j.balance.adjustments = 7

	loaded, err := jobFromRecord(j.record())
	if err != nil {
		t.Fatal(err)
	}
	c := &Coordinator{cfg: Config{Catalog: loadTestCatalog(t)}.withDefaults(), jobs: []*job{loaded}}
	c.log = c.cfg.Logger
	report := func(k int) []api.TaskReport {
		return []api.TaskReport{{TaskID: fmt.Sprintf("j1.s0.r%d", k), State: api.TaskRunning}}
	}
	again := map[string]*node{}
	for _, name := range []string{"a", "b"} {
		again[name] = &node{id: name + "~2", req: api.RegisterRequest{Name: name, Type: "cpu", Units: 1}, kind: config.KindCPU, state: api.NodeAlive}
	}
	c.adopt(again["a"], report(0), time.Now())
	if loaded.balance != nil || canRebalance(loaded) == "" {
		t.Fatalf("one of two replicas adopted: batching %+v, want none yet", loaded.balance)
	}
	c.adopt(again["b"], report(1), time.Now())
	b := loaded.balance
	if b == nil || b.mode != config.BatchingDynamic || b.ctl == nil || b.shape.lanes != 2 || b.adjustments != 7 || canRebalance(loaded) != "" {
		t.Fatalf("both replicas adopted: batching %+v, want dynamic over 2 lanes with a controller and 7 adjustments", b)
	}
	if _, batches := currentShare(loaded); !slices.Equal(batches, []int{300, 212}) {
		t.Errorf("batches after adoption %v, want the tasks' 300 212", batches)
	}
	if r := loaded.record(); r.Batching == nil || r.Batching.Adjustments != 7 {
		t.Errorf("the adopted job's record keeps batching %+v, want 7 adjustments", r.Batching)
	}

	// "auto" resolved to dynamic at placement stays dynamic, though the
	// nodes are alike now (resolved again, it would be uniform and leave
	// the unequal batches with no controller).
	autoSrc := strings.Replace(src, `mode = "dynamic"`, `mode = "auto"`, 1)
	auto := *j
	auto.source = autoSrc
	if auto.file, _ = jobAndModel(t, autoSrc); auto.file.Batching.Mode != config.BatchingAuto {
		t.Fatalf("batching mode %q, want auto", auto.file.Batching.Mode)
	}
	for _, keep := range []bool{true, false} {
		rec := auto.record()
		if !keep {
			rec.Batching.Mode = ""
		}
		taken, err := jobFromRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		for k, tr := range taken.tasks {
			tr.node = again[[]string{"a", "b"}[k]]
		}
		restoreBalance(taken)
		if want := map[bool]string{true: config.BatchingDynamic, false: config.BatchingUniform}[keep]; taken.balance.mode != want {
			t.Errorf("auto, the record's mode kept %v: restored as %q, want %q", keep, taken.balance.mode, want)
		}
	}

	j.resizeTo = &batchCarry{lanes: []int{400, 112}, byNode: map[string]int{"a": 400, "b": 112}, restarts: 2}
	j.state = api.JobRestarting
	restarting, err := jobFromRecord(j.record())
	if err != nil {
		t.Fatal(err)
	}
	if c := restarting.resizeTo; c == nil || !slices.Equal(c.lanes, []int{400, 112}) || c.byNode["a"] != 400 || c.byNode["b"] != 112 {
		t.Errorf("a job restarting to resize its batches is taken up with %+v, want lanes 400 112 by node", c)
	}

	bad := j.record()
	bad.Batching.Adjustments = -1
	if _, err := jobFromRecord(bad); err == nil || !strings.Contains(err.Error(), "batching") {
		t.Errorf("a record with -1 adjustments: %v, want refused", err)
	}
	bad = j.record()
	bad.Batching.Mode = "auto"
	if _, err := jobFromRecord(bad); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("a record whose mode is auto (never resolved): %v, want refused", err)
	}
	bad = j.record()
	bad.Batching.ResizeByNode["b"] = 0
	if _, err := jobFromRecord(bad); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("a record resizing to a batch of 0: %v, want refused", err)
	}
}
