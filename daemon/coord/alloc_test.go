package coord

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/alloc"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// allocJob is a long job (it does not end by itself in these tests) with
// extra job-file lines.
func allocJob(name, extra string) string {
	return fmt.Sprintf("version = 1\nname = %q\nmodel = \"ctrdnn\"\ndata = \"synthetic:1\"\nbatch = 64\nsteps = 10000000\nseed = 3\n%s", name, extra)
}

// startAllocCluster runs a coordinator with policy p and short epochs, and
// one fake CPU node of 4 units whose tasks advance 50 steps a heartbeat.
func startAllocCluster(t *testing.T, p string) (*testCluster, *fakeNode) {
	tc := startCluster(t, func(c *Config) { c.AllocPolicy, c.AllocEpoch = p, 150*time.Millisecond })
	n := newFakeNode("cpu-a", "cpu", 4, 9100)
	n.stride = 50
	tc.start(n)
	return tc, n
}

// unitsOf is the units job id's stage task was last handed on n, and its
// CPU share.
func unitsOf(n *fakeNode, id string) (int, float64) {
	_, current, _ := n.snapshot()
	t, ok := current[id+".s0.r0"]
	if !ok {
		return 0, 0
	}
	return t.Units, t.TaskCPUShare
}

// TestAllocatorMovesUnitsToTheNewJob: a job alone on a node gets all its
// units; once a second job arrives, the quality policy gives the young job
// (whose loss still falls) more of the node than the converged one at the
// next epochs, and the nodes' tasks carry the units and CPU shares.
func TestAllocatorMovesUnitsToTheNewJob(t *testing.T) {
	tc, n := startAllocCluster(t, string(alloc.Quality))
	old := tc.submit(allocJob("old", ""))
	waitFor(t, "the first job holds the node", func() bool { u, share := unitsOf(n, old); return u == 4 && share == 1 })
	waitFor(t, "the first job converges", func() bool { s := tc.job(old); return s.Step > 3000 })
	young := tc.submit(allocJob("young", ""))
	waitFor(t, "the young job gets most units", func() bool {
		uo, _ := unitsOf(n, old)
		uy, share := unitsOf(n, young)
		return uy == 3 && uo == 1 && share == 0.75
	})
	s := tc.job(young)
	if s.Alloc == nil || s.Alloc.Units != 3 || s.Alloc.Priority != 1 || s.Generation < 2 {
		t.Errorf("young job's alloc status %+v, generation %d; want 3 units, priority 1", s.Alloc, s.Generation)
	}
	var d api.AllocStatus
	tc.call("GET", "/v1/alloc", nil, 200, &d)
	if d.Policy != "quality" || d.Epochs == 0 || d.At == nil || len(d.Jobs) != 2 || d.DecisionMS < 0 {
		t.Errorf("GET /v1/alloc: %+v", d)
	}
}

// TestPriorityPolicyFollowsThePriorities: under the priority policy a
// heavy enough priority keeps the converged job ahead of the young one.
func TestPriorityPolicyFollowsThePriorities(t *testing.T) {
	tc, n := startAllocCluster(t, string(alloc.Priority))
	old := tc.submit(allocJob("old", "priority = 1e6\n"))
	waitFor(t, "the first job converges", func() bool { s := tc.job(old); return s.Step > 3000 })
	young := tc.submit(allocJob("young", ""))
	waitFor(t, "the weighted job keeps most units", func() bool {
		uo, _ := unitsOf(n, old)
		uy, _ := unitsOf(n, young)
		s := tc.job(young)
		return uo == 3 && uy == 1 && s.Alloc != nil && s.Alloc.Quality > 0
	})
}

// TestFairPolicySplitsTheNode: fair share gives two jobs on a node of 4
// units two each.
func TestFairPolicySplitsTheNode(t *testing.T) {
	tc, n := startAllocCluster(t, string(alloc.Fair))
	a := tc.submit(allocJob("a", ""))
	b := tc.submit(allocJob("b", ""))
	waitFor(t, "an even split", func() bool {
		ua, _ := unitsOf(n, a)
		ub, share := unitsOf(n, b)
		return ua == 2 && ub == 2 && share == 0.5
	})
}

// TestJobStopsAtItsTargetLossReduction: with the allocator off, a job with
// target_loss_reduction ends done once its measured quality reaches it,
// long before its last step.
func TestJobStopsAtItsTargetLossReduction(t *testing.T) {
	tc, _ := startAllocCluster(t, AllocOff)
	trace := filepath.Join(t.TempDir(), "target.jsonl")
	id := tc.submit(allocJob("target", fmt.Sprintf("target_loss_reduction = 0.9\ntrace = %q\n", trace)))
	s := tc.waitJob(id)
	if s.State != api.JobDone || s.Reason != "reached target loss reduction 0.9" || s.Step >= s.Steps {
		t.Fatalf("job %s: %s (%q) at step %d of %d", id, s.State, s.Reason, s.Step, s.Steps)
	}
	if s.Alloc == nil || s.Alloc.Quality < 0.9 || s.Alloc.Target != 0.9 || s.Alloc.Units < 1 {
		t.Errorf("alloc status %+v", s.Alloc)
	}
	if p, l := s.Alloc.PredictedLoss, s.Alloc.Loss; !(math.Abs(p-l) <= 0.1*l) {
		t.Errorf("predicted loss %g, measured %g: want within 10%%", p, l)
	}
	var lines []alloc.TraceLine
	waitFor(t, "the trace reaches the last step", func() bool {
		f, err := os.Open(trace)
		if err != nil {
			return false
		}
		defer f.Close()
		lines, err = alloc.ReadTrace(trace, f)
		return err == nil && len(lines) > 0 && lines[len(lines)-1].Step == s.Step
	})
	timed := 0
	for _, l := range lines {
		if l.Units != s.Alloc.Units || l.Loss != 1/(1+float64(l.Step)) {
			t.Fatalf("trace line %+v: want the fake node's loss and %d units", l, s.Alloc.Units)
		}
		if l.StepSeconds > 0 {
			timed++
		}
	}
	if timed == 0 {
		t.Error("no trace line has a step time")
	}
}

func TestAllocConfigIsChecked(t *testing.T) {
	cat := loadTestCatalog(t)
	for _, cfg := range []Config{{Catalog: cat, AllocPolicy: "greedy"}, {Catalog: cat, AllocPolicy: "fair", AllocEpoch: -time.Second}} {
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "alloc") {
			t.Errorf("%q %v: got %v, want an alloc error", cfg.AllocPolicy, cfg.AllocEpoch, err)
		}
	}
}

func TestThinKeepsTheFirstPointAndTheNewerHalf(t *testing.T) {
	h := make([]alloc.Point, maxHistory+1)
	for i := range h {
		h[i] = alloc.Point{Iter: float64(i), Loss: 1}
	}
	got := thin(h)
	if len(got) > maxHistory || got[0].Iter != 0 || got[len(got)-1].Iter != float64(maxHistory) {
		t.Fatalf("thinned to %d points, first %v, last %v", len(got), got[0], got[len(got)-1])
	}
	for i := 1; i < len(got); i++ {
		if got[i].Iter <= got[i-1].Iter {
			t.Fatalf("not in order at %d: %v", i, got[i-1:i+1])
		}
	}
}

// TestAdoptedJobIsTrackedAgain: a running job taken up after a restart of
// the coordinator (no record yet) gets one from its next report, with the
// units its task holds.
func TestAdoptedJobIsTrackedAgain(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), AllocPolicy: "fair", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	jf, err := config.ParseJob("job.toml", []byte(allocJob("adopted", "")))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{req: api.RegisterRequest{Name: "cpu-a", Type: "cpu", Units: 4}, state: api.NodeAlive}
	j := &job{id: "j1", file: jf, state: api.JobRunning, plan: &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 1}}}}
	task := &taskRun{job: j, node: n, task: api.Task{TaskID: "j1.s0.r0", Role: api.RoleStage, Units: 3, TaskCPUShare: 0.75}}
	j.tasks = []*taskRun{task}
	now := time.Now()
	for step := int64(1); step <= 2; step++ {
		c.recordProgress(task, api.TaskReport{TaskID: task.task.TaskID, Step: step, Loss: 1 / float64(step)}, now)
	}
	if j.alloc == nil || j.alloc.units != 3 || len(j.alloc.history) != 2 || j.alloc.history[0].Loss != 1 {
		t.Fatalf("record %+v", j.alloc)
	}
}

// TestAllocatorGivesAGPUTaskOneGPU: on a node that names two GPUs the
// allocator gives a job's stage task one unit (one GPU, its CPU not
// throttled), even alone on the node, and a second job the other GPU.
func TestAllocatorGivesAGPUTaskOneGPU(t *testing.T) {
	tc := startCluster(t, func(c *Config) {
		c.AllocPolicy, c.AllocEpoch = string(alloc.Fair), 150*time.Millisecond
		for i := range c.Catalog.Types {
			if c.Catalog.Types[i].Name == "cpu" {
				c.Catalog.Types[i].Price = 100 // the stage goes to the GPU type; the PS stays on the CPU node
			}
		}
	})
	g := newFakeNode("gpu-a", "gpu", 2, 9100)
	g.req.GPUDevices = []int{0, 1}
	g.req.GPUs = []api.GPU{{Name: "GPU", UUID: "GPU-0"}, {Name: "GPU", UUID: "GPU-1"}}
	g.stride = 50
	tc.start(g)
	tc.start(newFakeNode("cpu-a", "cpu", 1, 9101))
	first := tc.submit(allocJob("first", ""))
	waitFor(t, "the first job's stage on one GPU", func() bool { u, share := unitsOf(g, first); return u == 1 && share == 1 })
	time.Sleep(500 * time.Millisecond) // three epochs: alone on the node, it is still not given the second GPU
	if u, _ := unitsOf(g, first); u != 1 {
		t.Fatalf("the job alone on a 2-GPU node holds %d units, want 1 (a stage task runs on one GPU)", u)
	}
	second := tc.submit(allocJob("second", ""))
	waitFor(t, "the second job on the other GPU", func() bool {
		u1, _ := unitsOf(g, first)
		u2, share := unitsOf(g, second)
		return u1 == 1 && u2 == 1 && share == 1
	})
}

// TestAnAdoptedJobGoesOnFromItsRecordedHistory: a tracked job's record
// keeps its loss history (L_0 first) and step times, so after a restart of
// the coordinator its next report adds to them — a target loss reduction
// still counts from the first loss; saveProgress writes the record of a
// long history at most once a progressSaveEvery; a record no coordinator
// could have written is refused, naming what.
func TestAnAdoptedJobGoesOnFromItsRecordedHistory(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), AllocPolicy: "fair", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	src := allocJob("kept", "target_loss_reduction = 0.9\n")
	jf, err := config.ParseJob("job.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{req: api.RegisterRequest{Name: "cpu-a", Type: "cpu", Units: 4}, state: api.NodeAlive}
	plan := &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 1}}}
	planJSON, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{id: "j1", source: src, file: jf, state: api.JobRunning, plan: plan, planJSON: planJSON}
	j.tasks = []*taskRun{{job: j, node: n, task: api.Task{TaskID: "j1.s0.r0", Role: api.RoleStage, Units: 2}}}
	j.alloc = newJobAlloc(j, time.Now())
	j.alloc.history = []alloc.Point{{Iter: 1, Loss: 2}, {Iter: 50, Loss: 1}, {Iter: 100, Loss: 0.8}}
	j.alloc.samples = []alloc.StepSample{{Units: 2, Seconds: 0.01}}

	loaded, err := jobFromRecord(roundTrip(t, j.record()))
	if err != nil {
		t.Fatal(err)
	}
	task := loaded.tasks[0]
	task.node = n
	c.recordProgress(task, api.TaskReport{TaskID: task.task.TaskID, Step: 90, Loss: 0.9}, time.Now()) // a step recorded already
	c.recordProgress(task, api.TaskReport{TaskID: task.task.TaskID, Step: 120, Loss: 0.7}, time.Now())
	a := loaded.alloc
	if a == nil || len(a.history) != 4 || a.history[0] != (alloc.Point{Iter: 1, Loss: 2}) || a.history[3] != (alloc.Point{Iter: 120, Loss: 0.7}) ||
		len(a.samples) != 1 || loaded.heldProgress != nil {
		t.Fatalf("adopted record: %+v, want the 3 recorded losses, then step 120's, and the step time", a)
	}
	if p := loaded.record().Progress; p == nil || len(p.Losses) != 4 || p.Losses[0].Loss != 2 {
		t.Errorf("the adopted job's record keeps %+v", p)
	}

	dir := t.TempDir()
	c, err = New(Config{Catalog: loadTestCatalog(t), StateDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.jobs = append(c.jobs, loaded)
	now := time.Now()
	c.saveProgress(now)
	for i := range progressSaveSmall { // a long history: written once a progressSaveEvery
		loaded.alloc.history = append(loaded.alloc.history, alloc.Point{Iter: float64(130 + i), Loss: 0.6})
	}
	c.saveProgress(now.Add(progressSaveEvery / 2)) // too soon: not written
	c.mu.Unlock()
	if err := <-c.store.Flushed(); err != nil {
		t.Fatal(err)
	}
	c.store.Close()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	state, err := st.Load()
	if err != nil || len(state.Jobs) != 1 || state.Jobs[0].Progress == nil || len(state.Jobs[0].Progress.Losses) != 4 {
		t.Fatalf("the state database after saveProgress: %+v, %v; want the job with the 4 losses of the first write", state, err)
	}

	for name, spoil := range map[string]func(*store.Progress){
		"an infinite loss":       func(p *store.Progress) { p.Losses[1].Loss = math.Inf(1) },
		"steps out of order":     func(p *store.Progress) { p.Losses[2].Step = 10 },
		"a step time of 0":       func(p *store.Progress) { p.Steps[0].Seconds = 0 },
		"a step time on 0 units": func(p *store.Progress) { p.Steps[0].Units = 0 },
		"too long a history":     func(p *store.Progress) { p.Losses = make([]store.LossPoint, maxHistory+1) },
	} {
		rec := j.record()
		spoil(rec.Progress)
		if _, err := jobFromRecord(rec); err == nil || !strings.Contains(err.Error(), "progress") {
			t.Errorf("a record with %s: %v, want refused", name, err)
		}
	}
}
