package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/sched"
)

// replanJob is a short ctrdnn job that checkpoints every 10 steps and
// is re-planned from measured throughput.
const replanJob = `version = 1
name = "replan"
model = "ctrdnn"
data = "synthetic:1"
batch = 512
steps = 200
seed = 3
throughput_limit = 1000.0
[checkpoint]
every = 10
keep = 0 # the tests check each restore's checkpoint after the run
dir = %q
[replan]
enabled = true
warmup = 5
move_seconds = 0.1
`

// scaleType multiplies the device descriptor of cat's type named typ by
// f: every roofline time on it divides by f.
func scaleType(t *testing.T, cat *config.Catalog, typ string, f float64) *config.Catalog {
	t.Helper()
	out := *cat
	out.Types = slices.Clone(cat.Types)
	for i := range out.Types {
		if out.Types[i].Name == typ {
			out.Types[i].PeakFLOPS *= f
			out.Types[i].MemBandwidth *= f
			out.Types[i].LinkBandwidth *= f
			return &out
		}
	}
	t.Fatalf("no type %s", typ)
	return nil
}

// trueCluster makes fake nodes run at the speeds of a true problem: each
// stage replica advances a step per heartbeat and reports its share of
// the throughput the true problem gives its stage; each PS shard writes
// its file of every checkpoint the job's stages have all reached.
type trueCluster struct {
	t     *testing.T
	truth *sched.Problem

	mu      sync.Mutex
	steps   map[string]map[string]int64 // job -> stage task -> step
	written map[string]int64            // PS task -> newest checkpoint written
	files   map[string][]api.ShardCheckpoint
}

func (tr *trueCluster) node(name, typ string, units, port int) *fakeNode {
	n := newFakeNode(name, typ, units, port)
	n.report = func(t api.Task, r *api.TaskReport) { tr.report(typ, t, r) }
	return n
}

func (tr *trueCluster) report(typ string, t api.Task, r *api.TaskReport) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if t.Role == api.RolePS {
		r.State = api.TaskRunning
		r.Checkpoints = tr.checkpoint(t)
		return
	}
	if r.State == api.TaskDone {
		return
	}
	ti, _ := tr.truth.TypeIndex(typ)
	units := int(math.Round(float64(t.Units) * tr.truth.Batch / float64(t.Batch))) // the stage's: batches split by units
	x := tr.truth.StageThroughput(sched.Segment{First: t.FirstLayer, Last: t.LastLayer, Type: ti, Units: units})
	r.Step = min(t.Steps, max(r.Step, t.FirstStep)+1)
	r.Loss = 1 / (1 + float64(r.Step))
	r.Batch = t.Batch
	r.SamplesPerS = x * float64(t.Batch) / tr.truth.Batch
	r.StepSeconds = tr.truth.Batch / x
	r.State = api.TaskRunning
	if r.Step >= t.Steps {
		r.State = api.TaskDone
	}
	if tr.steps[t.JobID] == nil {
		tr.steps[t.JobID] = map[string]int64{}
	}
	tr.steps[t.JobID][t.TaskID] = r.Step
}

// checkpoint writes the shard files of the checkpoints every stage task
// of t's job has reached and returns the shard's newest reports. tr.mu is
// held.
func (tr *trueCluster) checkpoint(t api.Task) []api.ShardCheckpoint {
	var stages []string // the stage tasks of the job, as resized
	for i, l := range t.Layout {
		for k := range l.Replicas {
			if len(t.Members) == 0 || slices.Contains(t.Members, k) {
				stages = append(stages, fmt.Sprintf("%s.s%d.r%d", t.JobID, i, k))
			}
		}
	}
	reached := t.Steps
	for _, id := range stages {
		s, ok := tr.steps[t.JobID][id]
		if !ok {
			return tr.files[t.TaskID]
		}
		reached = min(reached, s)
	}
	if t.CheckpointEvery <= 0 {
		return nil
	}
	for step := max(tr.written[t.TaskID], t.FirstStep) + 1; step <= reached; step++ {
		if step%t.CheckpointEvery != 0 && step != t.Steps {
			continue
		}
		dir := ckpt.StepDir(t.CheckpointDir, step)
		path := filepath.Join(dir, ps.FileName(t.Shard, len(t.PS)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tr.t.Error(err)
			return nil
		}
		if err := os.WriteFile(path, fmt.Appendf(nil, "%s shard %d step %d", t.JobID, t.Shard, step), 0o644); err != nil {
			tr.t.Error(err)
			return nil
		}
		e, err := ckpt.DigestFile(path)
		if err != nil {
			tr.t.Error(err)
			return nil
		}
		tr.files[t.TaskID] = append(tr.files[t.TaskID], api.ShardCheckpoint{Step: step, File: e})
		tr.written[t.TaskID] = step
	}
	f := tr.files[t.TaskID]
	return f[max(0, len(f)-api.MaxReportedCheckpoints):]
}

// chainOf follows a job's restarts to the last job of its chain.
func (tc *testCluster) chainOf(id string) []api.JobStatus {
	tc.t.Helper()
	var chain []api.JobStatus
	for id != "" && len(chain) < 20 {
		s := tc.waitJob(id)
		chain = append(chain, s)
		id = s.RestartedAs
	}
	return chain
}

func planOf(t *testing.T, s api.JobStatus) sched.Plan {
	t.Helper()
	var p sched.Plan
	if err := json.Unmarshal(s.Plan, &p); err != nil {
		t.Fatalf("job %s's plan: %v", s.ID, err)
	}
	return p
}

// TestReplanMovesAJobToThePlanOfTheTrueSpeeds: the catalog's CPU type
// claims half the speed the CPU nodes have, so the planner puts the dense
// layers on the GPU; the measured throughput corrects the CPU type's
// factor, and the job moves, from a checkpoint, to the plan exact picks
// for the true speeds, losing no step on the way.
func TestReplanMovesAJobToThePlanOfTheTrueSpeeds(t *testing.T) {
	base := loadTestCatalog(t)
	wrong := scaleType(t, base, "cpu", 0.5)
	tc := startCluster(t, func(c *Config) { c.Catalog = wrong })
	src := fmt.Sprintf(replanJob, t.TempDir())
	jf, err := config.ParseJob(jobFileName, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	m, err := config.LoadModel(jf.Model)
	if err != nil {
		t.Fatal(err)
	}
	free := map[string]int{"cpu": 16, "gpu": 4} // the nodes below
	truth, err := JobProblem(jf, m, liveCatalog(base, free))
	if err != nil {
		t.Fatal(err)
	}
	want, err := sched.Run(context.Background(), "exact", truth, sched.Options{})
	if err != nil || !want.Feasible {
		t.Fatalf("the true plan: %v %+v", err, want)
	}
	believed, err := JobProblem(jf, m, liveCatalog(wrong, free))
	if err != nil {
		t.Fatal(err)
	}
	first, err := sched.Run(context.Background(), jf.Method, believed, sched.Options{})
	if err != nil || samePlan(first, want) {
		t.Fatalf("the wrong catalog should mislead the planner: it plans %v %v, the truth %v %v (%v)",
			first.Assign, stageUnits(first), want.Assign, stageUnits(want), err)
	}

	tr := &trueCluster{t: t, truth: truth, steps: map[string]map[string]int64{}, written: map[string]int64{},
		files: map[string][]api.ShardCheckpoint{}}
	tc.start(tr.node("cpu-a", "cpu", 8, 9101))
	tc.start(tr.node("cpu-b", "cpu", 8, 9102))
	tc.start(tr.node("gpu-a", "gpu", 4, 9103))
	chain := tc.chainOf(tc.submit(src))

	last := chain[len(chain)-1]
	if last.State != api.JobDone || last.Step != last.Steps || last.Checkpoint == nil || last.Checkpoint.Step != last.Steps {
		t.Fatalf("the chain's last job %s: %s %q at step %d of %d, checkpoint %+v", last.ID, last.State, last.Reason,
			last.Step, last.Steps, last.Checkpoint)
	}
	if got := planOf(t, last); !samePlan(&got, want) {
		t.Errorf("ends on %v units %v, want the true speeds' plan %v units %v", got.Assign, stageUnits(&got), want.Assign, stageUnits(want))
	}
	if got := planOf(t, chain[0]); !samePlan(&got, first) {
		t.Errorf("started on %v units %v, want %v units %v", got.Assign, stageUnits(&got), first.Assign, stageUnits(first))
	}
	checkChain(t, chain)
	r := last.Replan
	if len(chain) < 2 {
		t.Fatalf("the job never moved: %+v", r)
	}
	if r == nil || len(r.Replans) == 0 || r.Replans[0].Move != moveRestart || r.Replans[0].NewJob != chain[1].ID ||
		r.Replans[0].Gain <= jf.Replan.Gain || r.Replans[0].NewCost >= r.Replans[0].OldCost {
		t.Fatalf("replans %+v, want a first move by restart to %s with a gain above %g", r, chain[1].ID, jf.Replan.Gain)
	}
	t.Logf("first move: %+v", r.Replans[0])
	if s := r.Scales["cpu"]; s > 0.8 || s < 0.3 {
		t.Errorf("cpu scale %g, want about 0.5 (the CPU runs twice as fast as the catalog says)", s)
	}
	if s, ok := r.Scales["gpu"]; ok && math.Abs(s-1) > 0.01 {
		t.Errorf("gpu scale %g, want 1 (its descriptor is right)", s)
	}
	if r.FirstPlanTotal != first.Cost || r.MeasuredCost <= 0 || math.Abs(r.FirstPlanCost-first.Cost) > 1e-12*first.Cost {
		t.Errorf("costs: first plan %g (want %g), so far %g (want the whole run's), measured %g", r.FirstPlanTotal,
			first.Cost, r.FirstPlanCost, r.MeasuredCost)
	}
}

// checkChain checks that no update was lost along a restart chain: each
// job restores a complete checkpoint that its predecessor's chain wrote,
// at or before where the predecessor got and not before where it started,
// and moves are not counted as failures.
func checkChain(t *testing.T, chain []api.JobStatus) {
	t.Helper()
	ids := map[string]bool{}
	for i, s := range chain {
		ids[s.ID] = true
		if s.Restarts != 0 {
			t.Errorf("job %s counts %d restarts: a move is not a failure", s.ID, s.Restarts)
		}
		if i == 0 {
			continue
		}
		prev, cp := chain[i-1], s.RestoredFrom
		started := int64(0)
		if prev.RestoredFrom != nil {
			started = prev.RestoredFrom.Step
		}
		if s.RestartOf != prev.ID || cp == nil || cp.Step > prev.Step || cp.Step <= started {
			t.Fatalf("job %s restarts %s from %+v; %s went from step %d to %d", s.ID, s.RestartOf, cp, prev.ID, started, prev.Step)
		}
		man, err := ckpt.ReadManifest(cp.Dir)
		if err != nil || man.Step != cp.Step || !ids[man.JobID] {
			t.Fatalf("job %s restores %s: manifest %+v (%v), want step %d of a job of %v", s.ID, cp.Dir, man, err, cp.Step, ids)
		}
	}
}

// TestReplanResizesASingleStageJobInPlace: on CPU nodes only, the catalog
// claims half the CPU's speed, so the job gets 4 units to reach its
// throughput floor where 2 would do; once measured, the job drops a
// 2-unit replica at a step boundary, without a restart, and the
// re-planner, confirming the plan at later checkpoints, moves it no more.
func TestReplanResizesASingleStageJobInPlace(t *testing.T) {
	testReplanDropsUnits(t, "ps")
}

// TestReplanDoesNotResizeAnAllreduceRing: the same job syncing its dense
// parameters by allreduce, whose ring cannot change members, is priced a
// move by restart from its checkpoint, never a resize in place.
func TestReplanDoesNotResizeAnAllreduceRing(t *testing.T) {
	testReplanDropsUnits(t, "allreduce")
}

// testReplanDropsUnits runs the job of the two tests above with denseSync.
func testReplanDropsUnits(t *testing.T, denseSync string) {
	base := loadTestCatalog(t)
	wrong := scaleType(t, base, "cpu", 0.5)
	tc := startCluster(t, func(c *Config) { c.Catalog = wrong })
	// Units cost about the same per sample at 2 and 4 (near-linear
	// speed-up): a 1% gain is worth taking here.
	src := strings.NewReplacer("throughput_limit = 1000.0", "throughput_limit = 50000.0\ndense_sync = \""+denseSync+"\"",
		"enabled = true", "enabled = true\ngain = 0.01").Replace(fmt.Sprintf(replanJob, t.TempDir()))
	jf, err := config.ParseJob(jobFileName, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	m, err := config.LoadModel(jf.Model)
	if err != nil {
		t.Fatal(err)
	}
	free := map[string]int{"cpu": 4}
	truth, err := JobProblem(jf, m, liveCatalog(base, free))
	if err != nil {
		t.Fatal(err)
	}
	want, err := sched.Run(context.Background(), "exact", truth, sched.Options{})
	if err != nil || !want.Feasible || len(want.Stages) != 1 || want.Stages[0].Units != 2 {
		t.Fatalf("the true plan: %v %+v, want one stage of 2 units", err, want)
	}
	tr := &trueCluster{t: t, truth: truth, steps: map[string]map[string]int64{}, written: map[string]int64{},
		files: map[string][]api.ShardCheckpoint{}}
	tc.start(tr.node("cpu-a", "cpu", 2, 9111))
	tc.start(tr.node("cpu-b", "cpu", 2, 9112))
	if denseSync == "allreduce" {
		// A restart here costs more than it saves (the steps since the
		// checkpoint again, the start-up): the job stays where it is.
		s := tc.waitJob(tc.submit(src))
		r := s.Replan
		if s.State != api.JobDone || s.Step != s.Steps || r == nil || len(r.Replans) == 0 {
			t.Fatalf("%s %q at step %d of %d, replans %+v", s.State, s.Reason, s.Step, s.Steps, r)
		}
		for _, d := range r.Replans {
			if d.Move == moveResize || !slices.Equal(d.NewUnits, []int{2}) {
				t.Fatalf("replan %+v: want 2 units considered, and no resize in place of a ring", d)
			}
		}
		return
	}
	id := tc.submit(src)
	s := tc.waitJob(id)
	if s.State != api.JobDone || s.Step != s.Steps || s.RestartedAs != "" {
		t.Fatalf("%s %q at step %d of %d, restarted as %q", s.State, s.Reason, s.Step, s.Steps, s.RestartedAs)
	}
	if got := planOf(t, s); !samePlan(&got, want) || len(s.Stages) != 1 || len(s.Stages[0].Nodes) != 1 {
		t.Errorf("ends on %v units %v on nodes %v, want %v units %v on one node", got.Assign, stageUnits(&got),
			s.Stages, want.Assign, stageUnits(want))
	}
	r := s.Replan
	if r == nil || len(r.Replans) != 1 || r.Replans[0].Move != moveResize || r.Replans[0].FromStep != r.Replans[0].Step ||
		!slices.Equal(r.Replans[0].OldUnits, []int{4}) || !slices.Equal(r.Replans[0].NewUnits, []int{2}) {
		t.Fatalf("replans %+v, want one resize in place from 4 units to 2", r)
	}
}

// replanFixture is the first test's job, problem and plans, for the
// unit tests of the decision.
func replanFixture(t *testing.T) (jf *config.Job, m *config.Model, wrong *config.Catalog, first *sched.Plan) {
	t.Helper()
	jf, err := config.ParseJob(jobFileName, []byte(fmt.Sprintf(replanJob, t.TempDir())))
	if err != nil {
		t.Fatal(err)
	}
	if m, err = config.LoadModel(jf.Model); err != nil {
		t.Fatal(err)
	}
	wrong = liveCatalog(scaleType(t, loadTestCatalog(t), "cpu", 0.5), map[string]int{"cpu": 16, "gpu": 4})
	p, err := JobProblem(jf, m, wrong)
	if err != nil {
		t.Fatal(err)
	}
	if first, err = sched.Run(context.Background(), jf.Method, p, sched.Options{}); err != nil {
		t.Fatal(err)
	}
	return jf, m, wrong, first
}

// TestDecideReplanPaysForTheMove: a move is charged the steps trained
// again since the checkpoint and its start-up at the new plan's price, and
// taken only when the gain passes replan.gain.
func TestDecideReplanPaysForTheMove(t *testing.T) {
	jf, m, wrong, first := replanFixture(t)
	in := replanInput{j: &job{id: "j1"}, file: jf, model: m, cat: wrong, cur: first, scales: map[string]float64{"cpu": 0.5},
		step: 20, from: 20, total: 200}
	decide := func(in replanInput) api.Replan {
		t.Helper()
		d, err := decideReplan(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		return d.rec
	}
	free := decide(in)
	if free.Move != moveRestart || free.Gain <= jf.Replan.Gain || slices.Equal(free.NewAssign, first.Assign) {
		t.Fatalf("a free move: %+v, want a restart onto another plan", free)
	}
	lost := in
	lost.from = 10
	withLost := decide(lost)
	perStep := free.NewCost / float64(in.total-in.from)
	if got, want := withLost.NewCost-free.NewCost, 10*perStep; math.Abs(got-want) > 1e-9*want {
		t.Errorf("10 steps trained again cost %g more, want %g", got, want)
	}
	slow := in
	slow.moveS = 3600
	if d := decide(slow); d.Move != moveNone || d.NewCost <= free.NewCost || d.Gain >= free.Gain {
		t.Errorf("an hour's start-up: %+v, want no move and a higher cost", d)
	}
	strict := in
	f := *jf
	f.Replan.Gain = free.Gain + 0.01
	strict.file = &f
	if d := decide(strict); d.Move != moveNone || d.Gain != free.Gain {
		t.Errorf("a gain of %g below replan.gain %g: %+v, want no move", free.Gain, f.Replan.Gain, d)
	}
	unmeasured := in
	unmeasured.scales = map[string]float64{}
	if d := decide(unmeasured); d.Move != moveNone || !slices.Equal(d.NewAssign, first.Assign) {
		t.Errorf("without factors: %+v, want the current plan again", d)
	}
}

// TestMeasureReplanWarmsUpAndSmooths: measurements count only after the
// warm-up, once per step; the first seeds a type's factor, later ones
// move it by replan.smoothing; compute seconds take precedence over
// samples/s; a move's start-up is timed until the first step.
func TestMeasureReplanWarmsUpAndSmooths(t *testing.T) {
	jf, m, wrong, _ := replanFixture(t)
	c := &Coordinator{cfg: Config{Catalog: wrong}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	p, err := JobProblem(jf, m, wrong)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := sched.Run(context.Background(), "cpu", p, sched.Options{}) // one CPU stage
	if err != nil || len(plan.Stages) != 1 {
		t.Fatalf("%v %+v", err, plan)
	}
	j := &job{id: "j1", file: jf, model: m, plan: plan, gen: 1, state: api.JobRunning}
	run := &taskRun{job: j, task: api.Task{TaskID: "j1.s0.r0", Role: api.RoleStage, Units: plan.Stages[0].Units, Batch: jf.Batch}}
	j.tasks = []*taskRun{run}
	raw, err := c.rawThroughputs(j)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	report := func(step int64, samplesPerS, stepSeconds float64) *replanState {
		run.report = api.TaskReport{TaskID: run.task.TaskID, Step: step, SamplesPerS: samplesPerS, StepSeconds: stepSeconds, Batch: jf.Batch}
		c.measureReplan(j, started.Add(2*time.Second))
		return j.replan
	}
	r := report(0, 0, 0)
	r.movedAt = started
	if r = report(3, raw[0]/2, 0); r.samples != 0 || len(r.scales) != 0 {
		t.Fatalf("before the warm-up of %d steps: %+v", jf.Replan.Warmup, r)
	}
	if r.moves != 1 || r.moveSeconds != 2 {
		t.Errorf("start-up: %d moves, %g s, want 1 of 2 s", r.moves, r.moveSeconds)
	}
	if r = report(6, raw[0]/2, 0); r.samples != 1 || math.Abs(r.scales["cpu"]-2) > 1e-9 {
		t.Fatalf("half the predicted throughput: %+v, want a factor of 2", r)
	}
	if r = report(6, raw[0], 0); r.samples != 1 {
		t.Fatalf("the same step counted twice: %+v", r)
	}
	if r = report(7, raw[0], 0); math.Abs(r.scales["cpu"]-1.5) > 1e-9 {
		t.Fatalf("then the prediction: %+v, want 2 smoothed halfway to 1", r)
	}
	if r = report(8, raw[0], float64(jf.Batch)/(raw[0]/4.5)); math.Abs(r.scales["cpu"]-3) > 1e-9 {
		t.Fatalf("compute seconds of 4.5x the prediction: %+v, want 1.5 smoothed halfway to 4.5", r)
	}
	j.started, j.hourly = started.Add(-time.Hour), 2
	r.moving = true
	next := r.handOn(j, started)
	if next.spent != 2 || !next.movedAt.Equal(started) || next.scales["cpu"] != r.scales["cpu"] || next.gen != -1 {
		t.Errorf("handed on %+v, want 2 spent, the move timed from now and the factors", next)
	}
}

// TestReplanningOutlivesTheCoordinator: a job's record keeps what
// re-planning learned over its restart chain — the factors, their samples,
// the decisions, the chain's measured cost and first plan, the restarts'
// start-up — so a restarted coordinator's status shows them and its next
// samples go on smoothing the same factors; its placement's figures start
// again. A record no re-planner could have written is refused.
func TestReplanningOutlivesTheCoordinator(t *testing.T) {
	jf, m, _, _ := replanFixture(t)
	src := fmt.Sprintf(replanJob, t.TempDir())
	j := &job{id: "j2", source: src, file: jf, model: m, state: api.JobRunning, gen: 4}
	dec := api.Replan{Job: "j1", Step: 40, FromStep: 40, OldCost: 1, NewCost: 0.7, Gain: 0.3, Move: moveRestart, NewJob: "j2",
		Scales: map[string]float64{"cpu": 1.8}, OldAssign: []string{"gpu"}, NewAssign: []string{"cpu"}, OldUnits: []int{1}, NewUnits: []int{2}}
	j.replan = &replanState{scales: map[string]float64{"cpu": 1.8}, samples: 5, records: []api.Replan{dec}, spent: 0.25,
		firstTotal: 1.5, moveSeconds: 12, moves: 1, gen: 4, raw: []float64{100}, since: 30, sampled: 44, checked: 40}

	loaded, err := jobFromRecord(roundTrip(t, j.record()))
	if err != nil {
		t.Fatal(err)
	}
	r := loaded.replan
	if r == nil || r.scales["cpu"] != 1.8 || r.samples != 5 || len(r.records) != 1 || r.records[0].NewJob != "j2" ||
		r.spent != 0.25 || r.firstTotal != 1.5 || r.moveSeconds != 12 || r.moves != 1 {
		t.Fatalf("taken up as %+v", r)
	}
	if r.gen != -1 || r.raw != nil || r.checked != 0 {
		t.Errorf("the placement's figures came back: gen %d, raw %v, checked %d; want them to start again", r.gen, r.raw, r.checked)
	}
	if s := replanStatus(loaded, 0.5); s.MeasuredCost != 0.75 || s.FirstPlanTotal != 1.5 || s.MoveSeconds != 12 || len(s.Replans) != 1 {
		t.Errorf("status after the restart: %+v, want measured cost 0.25+0.5, first plan 1.5, 12 s moves, the decision", s)
	}

	for name, spoil := range map[string]func(*replanState){
		"a scale of 0":         func(r *replanState) { r.scales["cpu"] = 0 },
		"a negative cost":      func(r *replanState) { r.spent = -1 },
		"negative samples":     func(r *replanState) { r.samples = -2 },
		"too many decisions":   func(r *replanState) { r.records = make([]api.Replan, maxReplanRecords+1) },
		"an infinite start-up": func(r *replanState) { r.moveSeconds = math.Inf(1) },
	} {
		bad := &job{id: "j2", source: src, file: jf, state: api.JobRunning}
		bad.replan = &replanState{scales: map[string]float64{"cpu": 1}}
		spoil(bad.replan)
		if _, err := replanFromRecord(bad.record().Replan); err == nil {
			t.Errorf("a record with %s was taken up", name)
		}
	}
}
