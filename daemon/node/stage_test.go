package node

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// A stage task's schedule and lookahead reach its worker: ones the
// pipeline does not take are refused for good (retrying cannot help), the
// others build.
func TestStageWorkerTakesTheTasksSchedule(t *testing.T) {
	model, err := os.ReadFile("testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	a, ctx := startAgent(t, "a")
	s := api.Task{JobID: "sched", TaskID: "sched-s0r0", Role: api.RoleStage, Model: string(model), Data: "synthetic:1",
		Steps: 2, Seed: 1, Mode: api.ModeBSP, Plain: true, PS: []string{a.psAddr},
		Layout: []api.StageLayout{{FirstLayer: 0, LastLayer: 3, Replicas: 1}}, Replicas: 1, Units: 1, LastLayer: 3,
		DataShards: 1, Batch: 8, MicroBatches: 2}
	for _, schedule := range []string{"", "1f1b", "fill-drain", "gpipe"} {
		s.Schedule = schedule
		w, _, _, cleanup, err := a.stageWorker(ctx, s)
		if w != nil {
			w.Close()
		}
		cleanup()
		switch {
		case schedule == "gpipe" && (err == nil || !isPermanent(err) || !strings.Contains(err.Error(), "gpipe")):
			t.Errorf("schedule %q: %v, want a permanent error naming it", schedule, err)
		case schedule != "gpipe" && err != nil:
			t.Errorf("schedule %q: %v", schedule, err)
		}
	}
	s.Schedule = "1f1b"
	for _, lookahead := range []int{0, 2, -1, 33} {
		s.Lookahead = lookahead
		w, _, _, cleanup, err := a.stageWorker(ctx, s)
		if w != nil {
			w.Close()
		}
		cleanup()
		bad := lookahead < 0 || lookahead > 32
		switch {
		case bad && (err == nil || !isPermanent(err) || !strings.Contains(err.Error(), "lookahead")):
			t.Errorf("lookahead %d: %v, want a permanent error naming it", lookahead, err)
		case !bad && err != nil:
			t.Errorf("lookahead %d: %v", lookahead, err)
		}
	}
}

// Only a task that waits on other processes lets its steps return before
// their pushes are in: make run's job (one replica, its servers in this
// daemon) has nothing to hide behind the next forward.
func TestStageWorkerOverlapsStepsOnlyWhenItWaitsOnOthers(t *testing.T) {
	model, err := os.ReadFile("testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	a, ctx := startAgent(t, "a")
	for _, replicas := range []int{1, 2} {
		s := api.Task{JobID: "overlap", TaskID: "overlap-s0r0", Role: api.RoleStage, Model: string(model), Data: "synthetic:1",
			Steps: 2, Seed: 1, Mode: api.ModeBSP, Plain: true, PS: []string{a.psAddr},
			Layout: []api.StageLayout{{FirstLayer: 0, LastLayer: 3, Replicas: replicas}}, Replicas: replicas, Units: 1, LastLayer: 3,
			DataShards: replicas, Batch: 8}
		w, _, _, cleanup, err := a.stageWorker(ctx, s)
		if err != nil {
			cleanup()
			t.Fatalf("%d replicas: %v", replicas, err)
		}
		if got, want := w.OverlapsSteps(), replicas > 1; got != want {
			t.Errorf("%d replicas, the servers in this daemon: overlaps steps %v, want %v", replicas, got, want)
		}
		w.Close()
		cleanup()
	}
}

// TestAStageWhosePartnerNeverComesFailsItsTaskNotTheNode: stage 0 of a
// pipeline whose stage 1 never greets gives up after the ready timeout
// with an error, and its cleanup closes what it opened; it used to close
// its input through the result variable the error return had set to nil,
// and the node daemon panicked.
func TestAStageWhosePartnerNeverComesFailsItsTaskNotTheNode(t *testing.T) {
	model, err := os.ReadFile("testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	a, ctx := startAgent(t, "a")
	a.cfg.ReadyTimeout = 200 * time.Millisecond
	s := api.Task{JobID: "lonely", TaskID: "lonely-s0r0", Role: api.RoleStage, Model: string(model), Data: "synthetic:1",
		Steps: 2, Seed: 1, Mode: api.ModeBSP, Plain: true, PS: []string{a.psAddr},
		Layout:   []api.StageLayout{{FirstLayer: 0, LastLayer: 1, Replicas: 1}, {FirstLayer: 2, LastLayer: 3, Replicas: 1}},
		Replicas: 1, Units: 1, LastLayer: 1, Next: []string{"127.0.0.1:9"}, DataShards: 1, Batch: 8}
	w, in, _, cleanup, err := a.stageWorker(ctx, s)
	if err == nil || w != nil || in != nil || !strings.Contains(err.Error(), "did not come up") {
		t.Errorf("stage 0 alone: worker %v, input %v, err %v; want an error naming the partner", w, in, err)
	}
	cleanup()
}

// TestAPanickingTaskFailsAloneAndTheNodeGoesOn: a panic in a task's body
// (a bug) fails that task, saying so, instead of ending the node daemon
// with every other job's tasks; a body that returns leaves its task as it
// was.
func TestAPanickingTaskFailsAloneAndTheNodeGoesOn(t *testing.T) {
	a, ctx := startAgent(t, "a")
	newTask := func(id string) *task {
		return &task{spec: api.Task{JobID: "j", TaskID: id}, cancel: func() {}, report: api.TaskReport{TaskID: id, State: api.TaskRunning}}
	}
	bad, good := newTask("j.s0.r0"), newTask("j.s0.r1")
	a.contained(ctx, []*task{bad}, func() {
		var m map[string]int
		m["step"]++ // a nil map: the kind of bug a panic is
	})
	a.contained(ctx, []*task{good}, func() {})
	if bad.report.State != api.TaskFailed || !strings.Contains(bad.report.Error, "internal error") || !strings.Contains(bad.report.Error, "nil map") {
		t.Errorf("the panicking task: %s %q, want failed with the panic", bad.report.State, bad.report.Error)
	}
	if good.report.State != api.TaskRunning {
		t.Errorf("the task that returned: %s %q", good.report.State, good.report.Error)
	}
}

// A stage's meter reports its rate with the window it is measured over:
// the steps after the first, whose samples the two give back.
func TestMeterReportsItsWindow(t *testing.T) {
	m := newMeter()
	if rate, window := m.add(10); window <= 0 || rate <= 0 {
		t.Fatalf("first step: %v samples/s over %v", rate, window)
	}
	time.Sleep(5 * time.Millisecond)
	m.add(20)
	time.Sleep(5 * time.Millisecond)
	rate, window := m.add(30)
	if window < 10*time.Millisecond {
		t.Fatalf("window %v after two steps 5 ms apart from the first", window)
	}
	if got := rate * window.Seconds(); got < 49.999 || got > 50.001 {
		t.Fatalf("%v samples/s over %v is %v samples, want the 50 after the first step", rate, window, got)
	}
}

// A stage task whose own fields disagree with its layout is refused before
// it starts, naming the disagreement.
func TestCheckLayoutRefusesATaskAtOddsWithItsLayout(t *testing.T) {
	replicas := []int{2, 3, 1} // three stages
	task := func(stage, reps, prev, next int) api.Task {
		return api.Task{Stage: stage, Replicas: reps, Prev: make([]string, prev), Next: make([]string, next)}
	}
	for _, tc := range []struct {
		name string
		task api.Task
		want string // "" for accepted
	}{
		{"first stage", task(0, 2, 0, 3), ""},
		{"middle stage", task(1, 3, 2, 1), ""},
		{"last stage", task(2, 1, 3, 0), ""},
		{"stage past the layout", task(3, 1, 1, 0), "stage 3 of a 3-stage layout"},
		{"negative stage", task(-1, 2, 0, 3), "stage -1 of a 3-stage layout"},
		{"replicas the layout lacks", task(1, 2, 2, 1), "2 replicas, the layout says 3"},
		{"previous partners missing", task(1, 3, 1, 1), "1 previous partners for 2 replicas"},
		{"next partners missing", task(1, 3, 2, 0), "0 next partners for 1 replicas"},
	} {
		err := checkLayout(tc.task, replicas)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
