package coord

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// raiseJob is a ctrdnn job on CPU units that checkpoints every 10 steps;
// its throughput_limit is filled in.
const raiseJob = `version = 1
name = "raise"
model = "ctrdnn"
data = "synthetic:1"
batch = 512
steps = 200
seed = 3
method = "cpu"
throughput_limit = %.0f
[checkpoint]
every = 10
keep = 0 # the tests check each restore's checkpoint after the run
dir = %q
[replan]
move_seconds = 0.1
`

// TestRestartBelowItsLimitMovesBackUp: a restart that the survivor alone
// cannot carry at its throughput_limit runs below it; once another node
// joins, the job moves from its next checkpoint to a plan that meets the
// limit, spending none of its restarts and losing no step, and ends done
// at its limit.
func TestRestartBelowItsLimitMovesBackUp(t *testing.T) {
	chain, limit := runBelowLimitThenAddANode(t, false)
	if len(chain) != 2 || !strings.HasPrefix(chain[0].Reason, "moving back up to its throughput_limit") {
		t.Fatalf("a chain of %d jobs, want the restart and one move back up", len(chain))
	}
	last := chain[1]
	if last.State != api.JobDone || last.Step != last.Steps || last.Reason != "" {
		t.Fatalf("the moved job %s: %s %q at step %d of %d", last.ID, last.State, last.Reason, last.Step, last.Steps)
	}
	if p := planOf(t, last); p.Throughput < limit {
		t.Errorf("moved to %v units %v at %.0f samples/s, below the limit %.0f", p.Assign, stageUnits(&p), p.Throughput, limit)
	}
	checkChain(t, chain)
}

// TestASuspectNodeDoesNotMoveAJobBackUp: the node that joins is one that
// failed the job's chain and is still suspect: the job stays below its
// limit to the end rather than move onto a node that may fail it again.
func TestASuspectNodeDoesNotMoveAJobBackUp(t *testing.T) {
	chain, _ := runBelowLimitThenAddANode(t, true)
	if len(chain) != 1 || chain[0].State != api.JobDone || !strings.HasPrefix(chain[0].Reason, belowLimit) {
		t.Fatalf("a chain of %d jobs, want one done below its limit", len(chain))
	}
}

// raiseFixture is a cluster, fake nodes that run at the true speeds of
// cpu units (free of them in all), and raiseJob at a throughput_limit
// that needs more than 2 units (2.5 times one unit's).
func raiseFixture(t *testing.T, free int) (*testCluster, *trueCluster, string, float64) {
	tc := startCluster(t, nil)
	one := tc.expectedPlan(ctrJob + "method = \"cpu\"\nthroughput_limit = 1\n")
	limit := 2.5 * one.Throughput
	src := fmt.Sprintf(raiseJob, limit, t.TempDir())
	jf, m := jobAndModel(t, src)
	truth, err := JobProblem(jf, m, liveCatalog(tc.cat, map[string]int{"cpu": free}))
	if err != nil {
		t.Fatal(err)
	}
	tr := &trueCluster{t: t, truth: truth, steps: map[string]map[string]int64{}, written: map[string]int64{},
		files: map[string][]api.ShardCheckpoint{}}
	return tc, tr, src, limit
}

// runBelowLimitThenAddANode runs a restart below its limit on a 2-unit
// node, adds an 8-unit node (suspect to the job if suspect is set) and
// returns the restart chain and the limit.
func runBelowLimitThenAddANode(t *testing.T, suspect bool) ([]api.JobStatus, float64) {
	tc, tr, src, limit := raiseFixture(t, 10)
	tc.start(tr.node("survivor", "cpu", 2, 9121))
	reg := prometheus.NewPedanticRegistry()
	if err := tc.c.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	restarted := tc.enqueueAs(src, "j0")
	waitFor(t, "the restart running below its limit", func() bool {
		s := tc.job(restarted.id)
		return s.State == api.JobRunning && strings.HasPrefix(s.Reason, belowLimit) && s.Step > 0
	})
	job := map[string]string{"job_id": restarted.id}
	if one(t, reg, "heterps_job_below_throughput_limit", job) != 1 ||
		one(t, reg, "heterps_job_throughput_limit_samples_per_second", job) != math.Round(limit) {
		t.Errorf("metrics of a job below its limit %.0f: %v", limit, series(t, reg, "heterps_job_below_throughput_limit", job))
	}
	if suspect {
		tc.c.mu.Lock()
		restarted.suspects = append(restarted.suspects, store.Suspect{Node: "returned", Until: time.Now().Add(time.Hour)})
		tc.c.mu.Unlock()
	}
	tc.start(tr.node("returned", "cpu", 8, 9122))
	chain := tc.chainOf(restarted.id)
	for _, s := range chain {
		t.Logf("%s: %s %q", s.ID, s.State, s.Reason)
	}
	if last := chain[len(chain)-1]; last.Reason == "" && one(t, reg, "heterps_job_below_throughput_limit", map[string]string{"job_id": last.ID}) != 0 {
		t.Errorf("job %s at its limit counts as below it", last.ID)
	}
	return chain, limit
}

// TestMovingBackUpPaysForTheRestart: near the end of the run the steps
// trained again and the start-up cost more than the faster plan saves.
func TestMovingBackUpPaysForTheRestart(t *testing.T) {
	in := raiseInput{from: 900, step: 905, cur: 1000, moveS: 30}
	for _, c := range []struct {
		total int64
		x     float64
		moves bool
	}{
		{total: 100_000, x: 2000, moves: true},
		{total: 1000, x: 2000, moves: false}, // 95 steps left: 48.6 s kept, 25.6+30 s moved
		{total: 100_000, x: 1000, moves: false},
	} {
		keep, move := raiseTimes(in, c.x, 512, c.total)
		if (move < keep) != c.moves {
			t.Errorf("%d steps to %.0f samples/s: keep %.1f s, move %.1f s; want moving %v", c.total, c.x, keep, move, c.moves)
		}
	}
	in.cur = 0 // a shrunk stage predicted to reach nothing
	if keep, move := raiseTimes(in, 2000, 512, 1000); move >= keep {
		t.Errorf("a stage reaching nothing: keep %.1f s, move %.1f s; want moving", keep, move)
	}
}

// TestAJobWaitingAheadKeepsAJobBelowItsLimit: a job ahead in the queue
// that waits for units would take those a move frees, so the job below its
// limit is not evaluated while one waits; each checkpoint is evaluated
// once.
func TestAJobWaitingAheadKeepsAJobBelowItsLimit(t *testing.T) {
	jf, _ := jobAndModel(t, fmt.Sprintf(raiseJob, 1000.0, t.TempDir()))
	below := &job{id: "j2", seq: 2, file: jf, state: api.JobRunning, reason: belowLimit + ": 500 of 1000",
		plan: &sched.Plan{Throughput: 500, Stages: []sched.Stage{{Type: "cpu", Units: 1, Throughput: 500}}}}
	below.ckpt.latest = &api.CheckpointStatus{Step: 10}
	below.tasks = []*taskRun{{job: below, task: api.Task{Role: api.RoleStage}, report: api.TaskReport{TaskID: "j2.s0.r0", Step: 15}}}
	ahead := &job{id: "j1", seq: 1, file: jf, state: api.JobQueued}
	c := &Coordinator{cfg: Config{Catalog: loadTestCatalog(t)}, jobs: []*job{ahead, below}}
	if _, due := c.raiseDue(below, time.Now()); due {
		t.Fatal("evaluated while a job ahead waits for units")
	}
	ahead.state = api.JobRunning
	if in, due := c.raiseDue(below, time.Now()); !due || in.from != 10 || in.step != 15 || in.cur != 500 {
		t.Fatalf("not evaluated once the job ahead runs (%v): %+v", due, in)
	}
	if _, due := c.raiseDue(below, time.Now()); due {
		t.Fatal("the same checkpoint evaluated twice")
	}
	below.ckpt.latest = &api.CheckpointStatus{Step: 190}
	below.tasks[0].report.Step = jf.TotalSteps()
	if _, due := c.raiseDue(below, time.Now()); due {
		t.Fatal("evaluated once every step is trained")
	}
}

// TestAJobBelowItsLimitIsEvaluatedWhenTheClusterChanges: between
// checkpoints, and without any, a job below its limit is evaluated again
// when the cluster changes, at most once a raiseEvery, for a grow in place
// only (growOnly: a restart would need a checkpoint); a new checkpoint is
// evaluated at once, for either move.
func TestAJobBelowItsLimitIsEvaluatedWhenTheClusterChanges(t *testing.T) {
	jf, _ := jobAndModel(t, fmt.Sprintf(raiseJob, 1000.0, t.TempDir()))
	below := &job{id: "j2", seq: 2, file: jf, state: api.JobRunning, reason: belowLimit + ": 500 of 1000",
		plan: &sched.Plan{Throughput: 500, Stages: []sched.Stage{{Type: "cpu", Units: 1, Throughput: 500}}}}
	below.tasks = []*taskRun{{job: below, task: api.Task{Role: api.RoleStage}, report: api.TaskReport{TaskID: "j2.s0.r0", Step: 15}}}
	c := &Coordinator{cfg: Config{Catalog: loadTestCatalog(t)}, jobs: []*job{below}}
	now := time.Now()
	if _, due := c.raiseDue(below, now); due {
		t.Fatal("evaluated with no checkpoint and no change of the cluster")
	}
	c.changes++
	in, due := c.raiseDue(below, now)
	if !due || !in.growOnly || in.from != 0 || in.step != 15 {
		t.Fatalf("a node came: due %v, %+v; want a grow-only evaluation at step 15", due, in)
	}
	c.changes++
	if _, due := c.raiseDue(below, now.Add(raiseEvery/2)); due {
		t.Error("evaluated again within raiseEvery")
	}
	if in, due := c.raiseDue(below, now.Add(raiseEvery)); !due || !in.growOnly {
		t.Errorf("a change raiseEvery later: due %v, %+v", due, in)
	}
	below.suspects = []store.Suspect{{Node: "n0", Until: now.Add(2 * raiseEvery)}}
	if _, due := c.raiseDue(below, now.Add(2*raiseEvery).Add(-time.Second)); due {
		t.Error("evaluated with no change, a node still avoided")
	}
	if in, due := c.raiseDue(below, now.Add(2*raiseEvery)); !due || !in.growOnly {
		t.Errorf("the avoided node no longer avoided: due %v, %+v; want a grow-only evaluation", due, in)
	}
	if _, due := c.raiseDue(below, now.Add(4*raiseEvery)); due {
		t.Error("an expired suspicion evaluated twice")
	}
	below.ckpt.latest = &api.CheckpointStatus{Step: 20}
	if in, due := c.raiseDue(below, now.Add(4*raiseEvery)); !due || in.growOnly || in.from != 20 {
		t.Errorf("a new checkpoint: due %v, %+v; want evaluated at once for any move from 20", due, in)
	}
}

// TestAMoveSurvivesACoordinatorRestart: a job restarting to move is
// recorded so, and the coordinator that loads it restarts it as a move,
// spending none of its restarts.
func TestAMoveSurvivesACoordinatorRestart(t *testing.T) {
	src := fmt.Sprintf(raiseJob, 1000.0, t.TempDir())
	jf, _ := jobAndModel(t, src)
	for _, moving := range []bool{true, false} {
		j := &job{id: "j3", source: src, file: jf, state: api.JobRestarting, restarts: 1, moving: moving, failedAt: time.Now()}
		back, err := jobFromRecord(j.record())
		if err != nil {
			t.Fatal(err)
		}
		if back.moving != moving || back.restarts != 1 {
			t.Errorf("recorded moving %v: loaded moving %v, %d restarts", moving, back.moving, back.restarts)
		}
	}
}

// TestAShrunkStageMovesBackUp: a stage that syncs through the parameter
// servers goes on without a dead node's replica, below its limit, and
// says so; once another node joins, it moves back up from its next
// checkpoint, as a restart that goes on at its limit.
func TestAShrunkStageMovesBackUp(t *testing.T) {
	tc, tr, src, limit := raiseFixture(t, 12)
	nodes := []*fakeNode{tr.node("a", "cpu", 2, 9131), tr.node("b", "cpu", 2, 9132)}
	for _, n := range nodes {
		tc.start(n)
	}
	id := tc.submit(src)
	waitFor(t, "the job running", func() bool { return tc.job(id).Step > 0 })
	victim := stageOnlyNode(t, nodes)
	close(victim.stall)
	waitFor(t, "the stage shrunk below its limit", func() bool {
		return strings.HasPrefix(tc.job(id).Reason, shrunkBelow)
	})
	tc.start(tr.node("c", "cpu", 8, 9133))

	chain := tc.chainOf(id)
	for _, s := range chain {
		t.Logf("%s: %s %q", s.ID, s.State, s.Reason)
	}
	if len(chain) != 2 || !strings.HasPrefix(chain[0].Reason, "moving back up to its throughput_limit") {
		t.Fatalf("a chain of %d jobs, want the shrunk job and one move back up", len(chain))
	}
	last := chain[1]
	if last.State != api.JobDone || last.Step != last.Steps || last.Reason != "" || last.Restarts != 0 {
		t.Fatalf("the moved job %s: %s %q at step %d of %d, %d restarts", last.ID, last.State, last.Reason, last.Step, last.Steps, last.Restarts)
	}
	if p := planOf(t, last); p.Throughput < limit {
		t.Errorf("moved to %d units at %.0f samples/s, below the limit %.0f", p.Stages[0].Units, p.Throughput, limit)
	}
}

// TestAMoveBackUpNeedsNodesThatHostThePlan: a plan that meets the limit
// but that the live nodes cannot host (here: there are none) leaves the
// job running below its limit, rather than restarting it into the queue.
func TestAMoveBackUpNeedsNodesThatHostThePlan(t *testing.T) {
	jf, _ := jobAndModel(t, fmt.Sprintf(raiseJob, 1000.0, t.TempDir()))
	j := &job{id: "j2", seq: 2, file: jf, state: api.JobRunning, reason: belowLimit + ": 500 of 1000",
		plan: &sched.Plan{Throughput: 500, Stages: []sched.Stage{{Type: "cpu", Units: 1, Throughput: 500}}}}
	c := &Coordinator{cfg: Config{Catalog: loadTestCatalog(t)}, jobs: []*job{j}, log: slog.New(slog.DiscardHandler)}
	at := &sched.Plan{Feasible: true, Throughput: 1000, Stages: []sched.Stage{{Type: "cpu", Units: 2, Throughput: 1000}}}
	c.applyRaise(raiseInput{j: j, from: 10, step: 15, cur: 500}, at, nil, time.Now())
	if j.state != api.JobRunning || j.moving {
		t.Fatalf("the job is %s (moving %v): %q", j.state, j.moving, j.reason)
	}
}

// TestAShrunkStageWithSlackIsNotBelowItsLimit: a stage that loses a
// replica but whose units left are predicted to still reach its limit
// does not say it runs below it; one that falls short does. Both suspect
// the dead node.
func TestAShrunkStageWithSlackIsNotBelowItsLimit(t *testing.T) {
	c := &Coordinator{cfg: Config{Catalog: loadTestCatalog(t), SuspectFor: time.Minute}, log: slog.New(slog.DiscardHandler)}
	jf, m := jobAndModel(t, fmt.Sprintf(raiseJob, 1000.0, t.TempDir()))
	stage := sched.Stage{First: 0, Last: len(m.Shapes()) - 1, Type: "cpu", Units: 4}
	three, err := c.stageThroughputOn(&job{file: jf, model: m}, c.cfg.Catalog, stage, 3)
	if err != nil || three <= 0 {
		t.Fatalf("3 units: %v samples/s (%v)", three, err)
	}
	for _, limit := range []float64{0.9 * three, 1.1 * three} {
		f := *jf
		f.ThroughputLimit = limit
		j := &job{id: "j1", file: &f, model: m, state: api.JobRunning, plan: &sched.Plan{Stages: []sched.Stage{stage}}}
		var dead *node
		for i := range 4 {
			n := &node{req: api.RegisterRequest{Name: fmt.Sprintf("n%d", i)}}
			j.tasks = append(j.tasks, &taskRun{job: j, node: n, task: api.Task{Role: api.RoleStage, Replica: i, Units: 1}})
			dead = n
		}
		c.markShrunk(j, dead, 3, time.Now(), causeDied)
		if below := strings.HasPrefix(j.reason, shrunkBelow); below != (limit > three) || len(j.suspects) != 1 {
			t.Errorf("limit %.0f, 3 units reach %.0f: reason %q, suspects %v", limit, three, j.reason, j.suspects)
		}
	}
}

// TestStatusListsTheNodesAJobAvoids: a job's status lists its unexpired
// suspects once each, with the latest time, by name; a final job none.
func TestStatusListsTheNodesAJobAvoids(t *testing.T) {
	jf, _ := jobAndModel(t, fmt.Sprintf(raiseJob, 1000.0, t.TempDir()))
	now := time.Now()
	j := &job{id: "j1", file: jf, state: api.JobRunning, suspects: []store.Suspect{
		{Node: "b", Until: now.Add(time.Minute)}, {Node: "a", Until: now.Add(-time.Second)},
		{Node: "c", Until: now.Add(time.Minute)}, {Node: "b", Until: now.Add(2 * time.Minute)}}}
	c := &Coordinator{cfg: Config{Catalog: loadTestCatalog(t)}}
	got := c.status(j, now).Avoids
	want := []api.AvoidedNode{{Node: "b", Until: now.Add(2 * time.Minute)}, {Node: "c", Until: now.Add(time.Minute)}}
	if !slices.EqualFunc(got, want, func(x, y api.AvoidedNode) bool { return x.Node == y.Node && x.Until.Equal(y.Until) }) {
		t.Errorf("avoids %+v, want %+v", got, want)
	}
	j.state = api.JobFailed
	if got := c.status(j, now).Avoids; got != nil {
		t.Errorf("a failed job avoids %+v", got)
	}
}
