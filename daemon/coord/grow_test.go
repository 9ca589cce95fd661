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
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// growFixture is a coordinator with a running one-replica ps job j1 on
// node a (its PS shard there too) and nodes around it: b free, c of
// another type, d dead, e draining, f busy with another job's stage.
func growFixture(t *testing.T) (*Coordinator, *job, map[string]*node) {
	t.Helper()
	cat := loadTestCatalog(t)
	c := &Coordinator{cfg: Config{Catalog: cat, HeartbeatInterval: time.Second}.withDefaults(), drained: map[string]bool{}}
	c.log = c.cfg.Logger
	nodes := map[string]*node{}
	for _, n := range []struct {
		name, typ string
		state     api.NodeState
	}{{"a", "cpu", api.NodeAlive}, {"b", "cpu", api.NodeAlive}, {"c", "gpu", api.NodeAlive}, {"d", "cpu", api.NodeDead},
		{"e", "cpu", api.NodeAlive}, {"f", "cpu", api.NodeAlive}} {
		nd := &node{id: "id-" + n.name, req: api.RegisterRequest{Name: n.name, Type: n.typ, Units: 1, DataAddr: "127.0.0.1:7000"},
			kind: config.KindCPU, state: n.state}
		nodes[n.name] = nd
		c.nodes = append(c.nodes, nd)
	}
	c.drained["e"] = true
	layout := []api.StageLayout{{Replicas: 1, DenseSync: api.DenseSyncPS}}
	src := strings.Replace(strings.Replace(ctrJob, "batch = 512", "batch = 64", 1), "steps = 12", "steps = 100000", 1)
	jf, model := jobAndModel(t, src)
	j := &job{id: "j1", source: src, file: jf, model: model, state: api.JobRunning, gen: 1,
		plan: &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 1, Last: len(model.Shapes()) - 1}}, PSType: "cpu"}}
	j.tasks = []*taskRun{
		{job: j, node: nodes["a"], nodeName: "a", task: api.Task{TaskID: "j1.s0.r0", JobID: "j1", Role: api.RoleStage, Replicas: 1,
			Units: 1, Batch: 64, DataShards: 1, Layout: layout, Generation: 1},
			report: api.TaskReport{TaskID: "j1.s0.r0", State: api.TaskRunning, Step: 1000, SamplesPerS: 6400, Batch: 64,
				Segment: &api.DataSegment{From: 1, Start: 0, Members: []int{0}, Batches: []int{64}, At: 1, Position: 0}}},
		{job: j, node: nodes["a"], nodeName: "a", task: api.Task{TaskID: "j1.ps0", JobID: "j1", Role: api.RolePS, Layout: layout, Generation: 1}},
	}
	other := &job{id: "j0", file: &config.Job{Batch: 8, Steps: 10, Mode: api.ModeBSP}, state: api.JobRunning,
		plan: &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 1}}}}
	other.tasks = []*taskRun{{job: other, node: nodes["f"], task: api.Task{TaskID: "j0.s0.r0", Role: api.RoleStage}}}
	c.jobs = []*job{other, j}
	return c, j, nodes
}

func growRequest(node string) api.ResizeRequest {
	return api.ResizeRequest{Replicas: []int{0}, Batches: []int{32}, Add: []api.NewReplica{{Node: node, Batch: 32}}}
}

// A grow adds a replica on the named node from a step three heartbeats of
// steps past the furthest replica, with the data start where the stage
// has got to there, exact for every task; no other change reaches the job
// until the new replica has joined.
func TestGrowAddsAReplicaAheadOfTheStage(t *testing.T) {
	c, j, nodes := growFixture(t)
	j.file.Batching.Mode = config.BatchingDynamic
	j.balance = newBalance(j, &placement{stages: [][]replica{{{node: nodes["a"], units: 1, batch: 64}}}}, nil)
	if j.balance.ctl != nil {
		t.Fatal("a stage of one replica has a batch controller")
	}
	if _, err := c.patch("j1", growRequest("b")); err != nil {
		t.Fatal(err)
	}
	if j.balance.ctl == nil || j.balance.shape.lanes != 2 {
		t.Errorf("after the grow the batching has %d lanes and controller %v, want 2 lanes, dynamic", j.balance.shape.lanes, j.balance.ctl)
	}
	const from = 1000 + 1 + 4*100 // 100 steps/s reported, four 1 s heartbeats (three, and one of the reports' lag)
	wantStart, _ := data.Options{Split: data.SplitTrain}.After((from - 1) * 64)
	if len(j.tasks) != 3 || j.gen != 2 {
		t.Fatalf("%d tasks at generation %d, want 3 at 2", len(j.tasks), j.gen)
	}
	added := j.tasks[2].task
	if added.TaskID != "j1.s0.r1" || added.Replica != 1 || added.Replicas != 2 || added.Layout[0].Replicas != 2 ||
		added.FirstStep != from-1 || added.Batch != 32 || j.tasks[2].node != nodes["b"] {
		t.Errorf("the added task: %+v on %s", added, j.tasks[2].nodeName)
	}
	for _, tr := range j.tasks {
		if tr.task.Layout[0].Replicas != 2 || (tr.task.Role == api.RoleStage && tr.task.Replicas != 2) {
			t.Errorf("task %s carries the id bound %d (layout %d), want 2", tr.task.TaskID, tr.task.Replicas, tr.task.Layout[0].Replicas)
		}
	}
	for _, tr := range j.tasks {
		tk := tr.task
		if tk.Generation != 2 || tk.FromStep != from || tk.DataStart != wantStart || !slices.Equal(tk.Members, []int{0, 1}) || !slices.Equal(tk.Batches, []int{32, 32}) {
			t.Errorf("task %s: generation %d from step %d data start %d members %v batches %v; want 2, %d, %d, [0 1], [32 32]",
				tk.TaskID, tk.Generation, tk.FromStep, tk.DataStart, tk.Members, tk.Batches, from, wantStart)
		}
	}
	st := c.status(j, time.Now()).Stages[0]
	if st.Units != 2 || !slices.Equal(st.Nodes, []string{"a", "b"}) || !slices.Equal(st.Batches, []int{32, 32}) {
		t.Errorf("status: %d units on %v with batches %v, want 2 on [a b] with [32 32]", st.Units, st.Nodes, st.Batches)
	}
	price := c.price("cpu")
	if j.hourly != 3*price {
		t.Errorf("price %g an hour, want %g (two cpu units and the PS)", j.hourly, 3*price)
	}
	one, _ := c.stageThroughputOn(j, c.cfg.Catalog, j.plan.Stages[0], 1)
	if st.PredictedThroughput <= one || j.plan.Throughput != st.PredictedThroughput {
		t.Errorf("predicted %g samples/s for the grown stage (plan %g), want more than one unit's %g", st.PredictedThroughput, j.plan.Throughput, one)
	}

	expectConflict(t, c, "j1", api.ResizeRequest{Replicas: []int{0, 1}, Batches: []int{40, 24}}, "join")
	if js := c.status(j, time.Now()); js.JoiningAt != from {
		t.Errorf("status joining_at %d, want %d", js.JoiningAt, from)
	}
	reloaded, err := jobFromRecord(j.record()) // as a restarted coordinator has it, before its nodes report
	if err != nil {
		t.Fatal(err)
	}
	if !reloaded.joining() || reloaded.joinStep() != from {
		t.Errorf("reloaded from its record the job joins at step %d (joining %v), want %d: a restarted coordinator must not change it before the join",
			reloaded.joinStep(), reloaded.joining(), from)
	}
	if canRebalance(j) == "" {
		t.Error("the batch controller may change the batches of a job whose replicas are still joining")
	}
	j.tasks[0].report.Step = from
	if !j.joining() {
		t.Error("joined before the added replica reported the step")
	}
	j.tasks[2].report.Step = from
	if j.joining() {
		t.Error("still joining once every replica has reached the step")
	}
	if js := c.status(j, time.Now()); js.JoiningAt != 0 {
		t.Errorf("status joining_at %d once joined, want 0", js.JoiningAt)
	}
}

// When the node of a replica that is still joining dies, the job goes on
// as before the grow: the replica leaves, having trained nothing, and the
// grow is called off.
func TestAJoiningReplicasNodeDying(t *testing.T) {
	c, j, nodes := growFixture(t)
	j.file.Batching.Mode = config.BatchingDynamic
	j.balance = newBalance(j, &placement{stages: [][]replica{{{node: nodes["a"], units: 1, batch: 64}}}}, nil)
	if _, err := c.patch("j1", growRequest("b")); err != nil {
		t.Fatal(err)
	}
	if !c.shrink(j, nodes["b"], time.Now(), causeDied) {
		t.Fatal("the job did not go on without the joining replica")
	}
	if j.balance.ctl != nil || j.balance.shape.lanes != 0 {
		t.Errorf("after the shrink to one replica the batching has %d lanes and a controller %v, want none", j.balance.shape.lanes, j.balance.ctl)
	}
	if j.joining() || len(stageRuns(j)) != 1 || j.gen != 3 {
		t.Fatalf("joining %v, %d stage tasks at generation %d; want the grow called off, one replica, generation 3", j.joining(), len(stageRuns(j)), j.gen)
	}
	if next := idsAbove(j); next != 2 {
		t.Errorf("the next replica id is %d, want 2: replica 1 left, and its id is not given again", next)
	}
	if r0 := j.tasks[0].task; !slices.Equal(r0.Members, []int{0}) || r0.Batch != 64 || r0.DataStart != 0 || r0.FromStep != 1000 {
		t.Errorf("replica 0 after: members %v batch %d data start %d from step %d; want [0], 64, not exact, from step 1000 (resize's rule)",
			r0.Members, r0.Batch, r0.DataStart, r0.FromStep)
	}
}

// A grow is refused, naming why, unless the job's replicas all report the
// segment of its latest make-up and the node can take the replica.
func TestGrowRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, node, want string
		status           int
		mutate           func(*Coordinator, *job)
	}{
		{"unknown node", "zz", "no node", http.StatusNotFound, nil},
		{"dead", "d", "dead", http.StatusConflict, nil},
		{"draining", "e", "draining", http.StatusConflict, nil},
		{"another type", "c", "type gpu", http.StatusConflict, nil},
		{"another job's stage", "f", "another running job", http.StatusConflict, nil},
		{"its own replica's node", "a", "replica of this job", http.StatusConflict, nil},
		{"no position reported", "b", "not reported", http.StatusConflict, func(_ *Coordinator, j *job) { j.tasks[0].report.Segment = nil }},
		{"a change not reached", "b", "latest", http.StatusConflict, func(_ *Coordinator, j *job) { j.tasks[0].task.Batch = 60 }},
		{"a stale position", "b", "reports its data position at step 1,", http.StatusConflict, func(_ *Coordinator, j *job) { j.tasks[0].report.Step, j.file.Steps = 1<<21, 1<<22 }},
		{"ends too soon", "b", "ends at step", http.StatusConflict, func(_ *Coordinator, j *job) { j.file.Steps = 1200 }},
		{"allreduce", "b", "allreduce", http.StatusConflict, func(_ *Coordinator, j *job) {
			for _, tr := range j.tasks {
				tr.task.Layout = []api.StageLayout{{Replicas: 1, DenseSync: api.DenseSyncAllreduce}}
			}
		}},
		{"allocator", "b", "allocator", http.StatusConflict, func(c *Coordinator, _ *job) { c.cfg.AllocPolicy = "slaq" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, j, _ := growFixture(t)
			if tc.mutate != nil {
				tc.mutate(c, j)
			}
			_, err := c.patch("j1", growRequest(tc.node))
			var he *httpError
			if !errors.As(err, &he) || he.status != tc.status || !strings.Contains(he.msg, tc.want) {
				t.Fatalf("grow onto %s: %v, want %d naming %q", tc.node, err, tc.status, tc.want)
			}
			if len(j.tasks) != 2 || j.gen != 1 {
				t.Errorf("a refused grow changed the job: %d tasks, generation %d", len(j.tasks), j.gen)
			}
		})
	}
}

func expectConflict(t *testing.T, c *Coordinator, id string, req api.ResizeRequest, want string) {
	t.Helper()
	_, err := c.patch(id, req)
	var he *httpError
	if !errors.As(err, &he) || he.status != http.StatusConflict || !strings.Contains(he.msg, want) {
		t.Errorf("PATCH %+v: %v, want 409 naming %q", req, err, want)
	}
}

// A move back up is a grow when the plan is the job's stage with more
// units of its type and free nodes of the type offer them; otherwise it
// stays a restart (raiseInPlace says no).
func TestRaiseInPlaceOnlyWhenTheStageGrows(t *testing.T) {
	c, j, _ := growFixture(t)
	last := j.plan.Stages[0].Last
	plan := func(typ string, units int) *sched.Plan {
		return &sched.Plan{Feasible: true, Stages: []sched.Stage{{Type: typ, Units: units, Last: last}}}
	}
	req, ok := c.raiseInPlace(raiseInput{j: j, gen: j.gen}, plan("cpu", 2), nil)
	if !ok || !slices.Equal(req.Replicas, []int{0}) || !slices.Equal(req.Batches, []int{32}) ||
		!slices.Equal(req.Add, []api.NewReplica{{Node: "b", Batch: 32}}) {
		t.Fatalf("two cpu units: %+v, %v; want replica 0 kept and one added on b, 32 each", req, ok)
	}
	for _, tc := range []struct {
		name string
		plan *sched.Plan
		gen  int64
	}{
		{"another type", plan("gpu", 2), j.gen},
		{"no more units", plan("cpu", 1), j.gen},
		{"more units than the free nodes offer", plan("cpu", 3), j.gen},
		{"two stages", &sched.Plan{Feasible: true, Stages: []sched.Stage{{Type: "cpu", Units: 1, Last: 2}, {Type: "cpu", Units: 1, First: 3, Last: last}}}, j.gen},
		{"the job changed since", plan("cpu", 2), j.gen - 1},
	} {
		if req, ok := c.raiseInPlace(raiseInput{j: j, gen: tc.gen}, tc.plan, nil); ok {
			t.Errorf("%s: grows by %+v", tc.name, req)
		}
	}
	for _, tr := range j.tasks {
		tr.task.Layout = []api.StageLayout{{Replicas: 1, DenseSync: api.DenseSyncAllreduce}}
	}
	if req, ok := c.raiseInPlace(raiseInput{j: j, gen: j.gen}, plan("cpu", 2), nil); ok {
		t.Errorf("an allreduce stage grows by %+v", req)
	}
}

// A joining replica whose task fails (here: its node lacks the memory)
// calls the grow off: the job goes on as before, the node suspect to it,
// instead of failing for a replica that trained nothing.
func TestAJoiningReplicasFailureCallsTheGrowOff(t *testing.T) {
	c, j, nodes := growFixture(t)
	if _, err := c.patch("j1", growRequest("b")); err != nil {
		t.Fatal(err)
	}
	c.applyReport(nodes["b"], api.TaskReport{TaskID: "j1.s0.r1", State: api.TaskFailed, Step: 1400, Error: "out of memory", Permanent: true}, time.Now())
	if j.state != api.JobRunning || j.joining() || len(stageRuns(j)) != 1 || !j.suspect("b", time.Now()) {
		t.Fatalf("after the joining replica failed: %s (%q), joining %v, %d stage tasks, b suspect %v; want running as before, b suspect",
			j.state, j.reason, j.joining(), len(stageRuns(j)), j.suspect("b", time.Now()))
	}
	if r0 := j.tasks[0].task; !slices.Equal(r0.Members, []int{0}) || r0.Batch != 64 {
		t.Errorf("replica 0: members %v batch %d, want [0] and the whole batch", r0.Members, r0.Batch)
	}
	c.applyReport(nodes["a"], api.TaskReport{TaskID: "j1.s0.r0", State: api.TaskFailed, Step: 1100, Error: "boom"}, time.Now())
	if j.state == api.JobRunning {
		t.Error("the job runs on after its one remaining replica failed")
	}
}

// The margin a grow leaves follows the stage's recent pace when it is
// faster than the replicas' own averages (a stall, or a batch grown by a
// shrink, lowers those), and never falls below minGrowSteps.
func TestGrowMarginFollowsThePace(t *testing.T) {
	c, j, _ := growFixture(t)
	if m := c.growMargin(j); m != 400 {
		t.Errorf("margin %d steps at the 100 steps/s replica 0 reports, want 400", m)
	}
	t0 := time.Now()
	for i := range 5 {
		j.pace.observe(int64(1000+250*i), t0.Add(time.Duration(i)*time.Second))
	}
	j.pace.observe(1100, t0.Add(6*time.Second)) // an older report from a lagging replica
	if m := c.growMargin(j); m != 1000 {
		t.Errorf("margin %d steps at a pace of 250 steps/s, want 1000", m)
	}
	j.tasks[0].report.SamplesPerS, j.pace = 0, stepPace{}
	if m := c.growMargin(j); m != minGrowSteps {
		t.Errorf("margin %d steps with no rate known, want %d", m, minGrowSteps)
	}
}

// A task that reports it took the grow in flight too late (its shard had
// applied the step, or its replica had read its input) calls the grow
// off: the job goes on as before; a late report of an older change is
// ignored.
func TestALateReportCallsTheGrowOff(t *testing.T) {
	c, j, nodes := growFixture(t)
	if _, err := c.patch("j1", growRequest("b")); err != nil {
		t.Fatal(err)
	}
	c.applyReport(nodes["a"], api.TaskReport{TaskID: "j1.ps0", State: api.TaskRunning, Late: j.gen - 1}, time.Now())
	if !j.joining() {
		t.Fatal("a late report of an older change called the grow off")
	}
	c.applyReport(nodes["a"], api.TaskReport{TaskID: "j1.ps0", State: api.TaskRunning, Late: j.gen}, time.Now())
	if j.state != api.JobRunning || j.joining() || len(stageRuns(j)) != 1 || j.suspect("a", time.Now()) {
		t.Fatalf("after the late report: %s, joining %v, %d stage tasks, a suspect %v; want running on replica 0 alone, a not suspect",
			j.state, j.joining(), len(stageRuns(j)), j.suspect("a", time.Now()))
	}
}

// A grow that took a job back up to its throughput_limit and is called
// off (a task took it too late) leaves the job on its replicas left with
// the plan of their units, saying it runs below its limit again, and due
// for another move back up a raiseEvery later — else it ran below its
// limit on a plan and a status that said otherwise, and never grew again.
func TestACalledOffGrowRunsBelowItsLimitAgain(t *testing.T) {
	c, j, nodes := growFixture(t)
	j.file.ThroughputLimit = 1e12 // 2 units do not reach it either: the grow is a step up, the call-off a step back
	j.reason = shrunkBelow + ": 1 of its 2 units left"
	if _, err := c.patch("j1", growRequest("b")); err != nil {
		t.Fatal(err)
	}
	if units := j.plan.Stages[0].Units; units != 2 {
		t.Fatalf("the grow planned %d units, want 2", units)
	}
	j.reason = "" // as when 2 units reach the limit
	now := time.Now()
	j.raisedAt, j.raiseChanges = now, c.changes
	c.applyReport(nodes["a"], api.TaskReport{TaskID: "j1.ps0", State: api.TaskRunning, Late: j.gen}, now)
	if j.joining() || len(stageRuns(j)) != 1 {
		t.Fatalf("the grow was not called off: joining %v, %d stage tasks", j.joining(), len(stageRuns(j)))
	}
	if units := j.plan.Stages[0].Units; units != 1 || !strings.HasPrefix(j.reason, shrunkBelow) || !strings.Contains(j.reason, "a grow was called off") {
		t.Fatalf("after the call-off: a plan of %d units, reason %q; want 1 unit, below its limit", units, j.reason)
	}
	if in, due := c.raiseDue(j, now.Add(raiseEvery)); !due || !in.growOnly {
		t.Errorf("not evaluated again a raiseEvery after the call-off: due %v", due)
	}
}

// A move back up that the coordinator refuses to grow for now (here: the
// replica has not reported its data position) waits for the next
// checkpoints, maxGrowWaits of them, then moves by the restart path.
func TestRaiseWaitsForAGrowThenRestarts(t *testing.T) {
	c, j, _ := growFixture(t)
	j.tasks[0].report.Segment = nil
	last := j.plan.Stages[0].Last
	plan := &sched.Plan{Feasible: true, Throughput: 2000, Stages: []sched.Stage{{Type: "cpu", Units: 2, Last: last}}}
	in := raiseInput{j: j, gen: j.gen, cur: 1000, step: 1000, from: 1000}
	req, ok := c.raiseInPlace(in, plan, nil)
	if !ok {
		t.Fatal("no grow for a plan of two cpu units with b free")
	}
	for wait := 1; wait <= maxGrowWaits; wait++ {
		c.raiseByGrowing(in, req, plan)
		if j.growWaits != wait || j.state != api.JobRunning || len(stageRuns(j)) != 1 {
			t.Fatalf("refusal %d: %d waits, %s with %d replicas; want %d waits, still running as it was", wait, j.growWaits, j.state, len(stageRuns(j)), wait)
		}
	}
	c.raiseByGrowing(in, req, plan)
	if j.growWaits != 0 || j.state != api.JobRestarting || !j.moving {
		t.Errorf("after %d waits: %d waits, %s (moving %v); want the move back up by a restart", maxGrowWaits, j.growWaits, j.state, j.moving)
	}
}

// A grow-only evaluation (a node came, no new checkpoint) whose grow the
// coordinator refuses for now is evaluated again a raiseEvery later
// without another change of the cluster — else a job without checkpoints
// would stay shrunk when its replicas had not reported the shrink yet as
// the node came — up to maxGrowRetries times, and spends none of the
// checkpoint-driven waits.
func TestAGrowRefusedForNowIsTriedAgainShortly(t *testing.T) {
	c, j, _ := growFixture(t)
	j.tasks[0].report.Segment = nil // refused for now: no data position yet
	j.reason = shrunkBelow + ": 1 of its 2 units left"
	last := j.plan.Stages[0].Last
	plan := &sched.Plan{Feasible: true, Throughput: 2000, Stages: []sched.Stage{{Type: "cpu", Units: 2, Last: last}}}
	now := time.Now()
	c.changes++
	in, due := c.raiseDue(j, now)
	if !due || !in.growOnly {
		t.Fatalf("a node came: due %v, grow only %v", due, in.growOnly)
	}
	req, ok := c.raiseInPlace(in, plan, nil)
	if !ok {
		t.Fatal("no grow for a plan of two cpu units with b free")
	}
	for retry := 1; retry <= maxGrowRetries; retry++ {
		c.raiseByGrowing(in, req, plan)
		if j.growRetries != retry || !j.retryGrow || j.growWaits != 0 || j.state != api.JobRunning {
			t.Fatalf("refusal %d: %d retries (again %v), %d checkpoint waits, %s", retry, j.growRetries, j.retryGrow, j.growWaits, j.state)
		}
		now = now.Add(raiseEvery)
		if in, due = c.raiseDue(j, now.Add(-time.Millisecond)); due {
			t.Fatalf("refusal %d: evaluated again within raiseEvery", retry)
		}
		if in, due = c.raiseDue(j, now); !due || !in.growOnly {
			t.Fatalf("refusal %d: not evaluated again a raiseEvery later with no change of the cluster", retry)
		}
	}
	c.raiseByGrowing(in, req, plan)
	if j.retryGrow || j.growWaits != 0 || j.state != api.JobRunning {
		t.Errorf("after %d retries: again %v, %d checkpoint waits, %s; want no more retries, nothing else", maxGrowRetries, j.retryGrow, j.growWaits, j.state)
	}
	if _, due := c.raiseDue(j, now.Add(raiseEvery)); due {
		t.Error("evaluated again with no change of the cluster after the retries ran out")
	}
}

// TestAnAcknowledgedChangeIsOnDisk: a PATCH is answered once the job's
// new record is committed, so a coordinator killed right after the answer
// comes back with the change; one the state database cannot record is
// answered 503.
func TestAnAcknowledgedChangeIsOnDisk(t *testing.T) {
	c, _, _ := growFixture(t)
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c.store = st
	if _, err := c.patch("j1", growRequest("b")); err != nil {
		t.Fatal(err)
	}
	state, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	var recorded *store.Job
	for i := range state.Jobs {
		if state.Jobs[i].ID == "j1" {
			recorded = &state.Jobs[i]
		}
	}
	if recorded == nil || recorded.Generation != 2 || len(recorded.Tasks) != 3 {
		t.Fatalf("recorded after the answer: %+v, want generation 2 with the added replica", recorded)
	}

	c, _, _ = growFixture(t)
	closed, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	c.store = closed
	_, err = c.patch("j1", api.ResizeRequest{Replicas: []int{0}, Batches: []int{48}})
	var he *httpError
	if !errors.As(err, &he) || he.status != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "not recorded in the state database") {
		t.Errorf("a resize the state database could not record: %v, want 503", err)
	}
}
