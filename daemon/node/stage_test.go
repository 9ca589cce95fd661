package node

import (
	"os"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/api"
)

// A stage task's schedule reaches its worker: one the pipeline does not
// know is refused for good (retrying cannot help), the known ones build.
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
		w, cleanup, err := a.stageWorker(ctx, s)
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
}
