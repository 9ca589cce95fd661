package coord

import (
	"slices"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

func TestLanesOf(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		lanes  int
		wide   []int
		why    string
	}{
		{[]int{2}, 2, []int{0}, ""},
		{[]int{2, 2}, 2, []int{0, 1}, ""},
		{[]int{1, 3, 1, 3}, 3, []int{1, 3}, ""},
		{[]int{1}, 0, nil, "one replica"},
		{[]int{1, 1}, 0, nil, "one replica"},
		{[]int{2, 3}, 0, nil, "[2 3] replicas"},
	} {
		s := lanesOf(tc.counts)
		whyOK := s.why == ""
		if tc.why != "" {
			whyOK = strings.Contains(s.why, tc.why)
		}
		if s.lanes != tc.lanes || !slices.Equal(s.wide, tc.wide) || !whyOK {
			t.Errorf("lanesOf(%v) = %+v, want %d lanes over stages %v, why containing %q", tc.counts, s, tc.lanes, tc.wide, tc.why)
		}
	}
}

// testPlacement places stages of counts replicas, one unit each, on nodes
// at the given CPU shares (in stage order).
func testPlacement(counts []int, shares ...float64) *placement {
	pl := &placement{}
	n := 0
	for _, c := range counts {
		var reps []replica
		for range c {
			nd := &node{req: api.RegisterRequest{Name: string(rune('a' + n)), Units: 1, CPUShare: shares[n]}}
			reps = append(reps, replica{node: nd, units: 1})
			n++
		}
		pl.stages = append(pl.stages, reps)
	}
	return pl
}

func testLaneJob(batch int, mode string) *job {
	jf := &config.Job{Batch: batch, Mode: api.ModeBSP, MicroBatches: 1,
		Batching: config.JobBatching{Mode: mode, Interval: 1, Smoothing: 0, Deadband: 0.05, MinBatch: 1}}
	return &job{id: "j1", file: jf, state: api.JobRunning}
}

// TestVariableBatchingSetsLanes: in variable mode every wide stage's
// replica k gets lane k's batch, in proportion to the least units x share
// of the lane; a stage of one replica keeps the whole batch and its task
// the lanes to split by. Shapes that are not lanes stay uniform and say why.
func TestVariableBatchingSetsLanes(t *testing.T) {
	counts := []int{1, 2, 2}
	pl := testPlacement(counts, 1, 1, 0.25, 0.5, 1) // lane 0: shares 1, 0.5; lane 1: 0.25, 1
	for i := range pl.stages {
		if err := splitBatch(i, 30, pl.stages[i]); err != nil {
			t.Fatal(err)
		}
	}
	j := testLaneJob(30, config.BatchingVariable)
	b := newBalance(j, pl, nil)
	if b.mode != config.BatchingVariable || b.shape.lanes != 2 {
		t.Fatalf("balance %+v", b)
	}
	for i, want := range [][]int{{30}, {20, 10}, {20, 10}} {
		if got := batchesOf(pl.stages[i]); !slices.Equal(got, want) {
			t.Errorf("stage %d batches %v, want %v", i, got, want)
		}
	}
	task := api.Task{Stage: 0}
	laneTaskBatches(&task, pl, b)
	if !slices.Equal(task.NextBatches, []int{20, 10}) || task.Batches != nil {
		t.Errorf("stage 0's task: batches %v, next %v; want none and the lanes [20 10]", task.Batches, task.NextBatches)
	}
	task = api.Task{Stage: 2}
	laneTaskBatches(&task, pl, b)
	if !slices.Equal(task.Batches, []int{20, 10}) || task.NextBatches != nil {
		t.Errorf("stage 2's task: batches %v, next %v; want the lanes and none", task.Batches, task.NextBatches)
	}

	odd := testPlacement([]int{2, 3}, 1, 0.25, 1, 1, 1)
	ob := newBalance(testLaneJob(30, config.BatchingDynamic), odd, nil)
	if s := ob.status(); s.Mode != config.BatchingUniform || !strings.Contains(s.Reason, "[2 3] replicas") || ob.ctl != nil {
		t.Errorf("stages of 2 and 3 replicas: status %+v, want uniform with the reason", s)
	}
}

// TestLaneTimeIsTheSlowestStage: the controller sees lane k's time as the
// largest busy time of its replicas, and the batches lane k ran as the
// first wide stage's; a resize gives every stage of the lane the new batch
// from one step ahead of every replica (BSP), and the stage of one replica
// the lanes.
func TestLaneTimeIsTheSlowestStage(t *testing.T) {
	c := &Coordinator{kick: make(chan struct{}, 1)}
	j := testLaneJob(8, config.BatchingDynamic)
	j.balance = &jobBalance{mode: config.BatchingDynamic, shape: lanesOf([]int{1, 2, 2})}
	add := func(stage, replica, replicas, batch int, step int64, secs float64) {
		j.tasks = append(j.tasks, &taskRun{job: j, task: api.Task{Role: api.RoleStage, Stage: stage, Replica: replica, Replicas: replicas, Batch: batch},
			report: api.TaskReport{Step: step, Batch: batch, StepSeconds: secs}})
	}
	add(0, 0, 1, 8, 12, 0.5)
	add(1, 0, 2, 4, 11, 0.1)
	add(1, 1, 2, 4, 11, 0.4)
	add(2, 0, 2, 4, 10, 0.3)
	add(2, 1, 2, 4, 10, 0.2)
	o, ok := observeLanes(j, j.balance.shape)
	if !ok || !slices.Equal(o.seconds, []float64{0.3, 0.4}) || !slices.Equal(o.batches, []int{4, 4}) || o.step != 10 {
		t.Fatalf("observation %+v (%v), want lane times [0.3 0.4] at batches [4 4], step 10", o, ok)
	}
	from := c.resizeLanes(j, []int{5, 3})
	if want := 12 + int64(minRebatchSteps); from != want {
		t.Errorf("from step %d, want %d: the furthest replica's 12 and the margin", from, want)
	}
	for _, tr := range j.tasks {
		tk := tr.task
		switch {
		case tk.Stage == 0 && (!slices.Equal(tk.NextBatches, []int{5, 3}) || !slices.Equal(tk.Batches, []int{8}) || tk.FromStep != from):
			t.Errorf("stage 0's task after the resize: %+v", tk)
		case tk.Stage > 0 && (tk.Batch != []int{5, 3}[tk.Replica] || !slices.Equal(tk.Batches, []int{5, 3}) || !slices.Equal(tk.Members, []int{0, 1}) || tk.FromStep != from):
			t.Errorf("stage %d replica %d's task after the resize: %+v", tk.Stage, tk.Replica, tk)
		}
	}
	if again := c.resizeLanes(j, []int{4, 4}); again != from {
		t.Errorf("a second resize while the first is %d steps ahead: from %d, want the pending step %d", from-12, again, from)
	}
	j.file.Mode = api.ModeASP
	if asp := c.resizeLanes(j, []int{5, 3}); asp != 13 {
		t.Errorf("ASP: from step %d, want stage 0's next, 13", asp)
	}
}

// TestCarriedBatchesFollowTheirNodes: a job restarted to resize its
// batches gets them by node, whatever replica order its new placement
// has; on other nodes it keeps the placement's split.
func TestCarriedBatchesFollowTheirNodes(t *testing.T) {
	carry := &batchCarry{lanes: []int{800, 224}, byNode: map[string]int{"a": 800, "b": 224}}
	pl := testPlacement([]int{2}, 1, 0.25)
	pl.stages[0][0].node.req.Name, pl.stages[0][1].node.req.Name = "b", "a"
	if got, ok := carry.lanesFor(pl, lanesOf([]int{2}), 1024); !ok || !slices.Equal(got, []int{224, 800}) {
		t.Errorf("placed on b, a: %v (%v), want [224 800]", got, ok)
	}
	pl.stages[0][0].node.req.Name = "c"
	if got, ok := carry.lanesFor(pl, lanesOf([]int{2}), 1024); ok {
		t.Errorf("placed on c, a: %v, want the placement's own split", got)
	}
	j := testLaneJob(1024, config.BatchingDynamic)
	j.carry = &batchCarry{lanes: []int{800, 224}, byNode: map[string]int{"c": 224, "a": 800}, adjustments: 3, restarts: 2}
	for i := range pl.stages {
		if err := splitBatch(i, 1024, pl.stages[i]); err != nil {
			t.Fatal(err)
		}
	}
	b := newBalance(j, pl, j.carry)
	if got := batchesOf(pl.stages[0]); !slices.Equal(got, []int{224, 800}) || b.adjustments != 3 || b.restarts != 2 {
		t.Errorf("restarted job: batches %v, %d adjustments, %d restarts; want [224 800], 3, 2", got, b.adjustments, b.restarts)
	}
}
