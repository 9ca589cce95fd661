package main

import (
	"context"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/pelletier/go-toml/v2"
)

func TestJobTOMLRunsTheTracesSyncModeAndBatching(t *testing.T) {
	tr := &trace{model: models["linreg"], sync: syncASP, mode: config.BatchingDynamic}
	j, err := config.ParseJob("job.toml", jobTOML(tr, 1234, "/tmp/ckpt", 0))
	if err != nil {
		t.Fatal(err)
	}
	if j.Model != "linreg" || j.Data != "regress:1" || j.Mode != "asp" || j.Batching.Mode != config.BatchingDynamic || j.ThroughputLimit != 1234 {
		t.Errorf("job %+v: want linreg on regress:1, ASP, dynamic, limit 1234", j)
	}
	if j.Checkpoint.Every != 0 {
		t.Errorf("checkpoint every %d: a run without resize should not checkpoint", j.Checkpoint.Every)
	}
}

func TestJobTOMLOfAResizeRunCheckpoints(t *testing.T) {
	m := models["ctrdnn"]
	in := &trace{model: m, sync: syncBSP, mode: config.BatchingDynamic, resize: resizeInPlace}
	j, err := config.ParseJob("job.toml", jobTOML(in, 1, "/tmp/ckpt", 0))
	if err != nil {
		t.Fatal(err)
	}
	if j.Batching.Resize != resizeInPlace || j.Checkpoint.Dir != "/tmp/ckpt" || j.Checkpoint.Every != int64(m.steps/5) {
		t.Errorf("resize %q, checkpoint %+v; want in-place, /tmp/ckpt every %d", j.Batching.Resize, j.Checkpoint, m.steps/5)
	}
	// The config may not accept restart yet: decode without validating.
	var raw config.Job
	re := &trace{model: m, sync: syncBSP, mode: config.BatchingDynamic, resize: resizeKillRestart}
	if err := toml.Unmarshal(jobTOML(re, 1, "/tmp/ckpt", 7), &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Batching.Resize != resizeKillRestart || raw.Checkpoint.Every != 7 {
		t.Errorf("resize %q every %d, want restart every 7", raw.Batching.Resize, raw.Checkpoint.Every)
	}
}

// fakeCoordinator answers each job id's statuses in turn, the last one
// from then on.
type fakeCoordinator struct {
	jobs      map[string][]api.JobStatus
	throttled []string
}

func (f *fakeCoordinator) Job(_ context.Context, id string) (api.JobStatus, error) {
	q := f.jobs[id]
	s := q[0]
	if len(q) > 1 {
		f.jobs[id] = q[1:]
	}
	return s, nil
}

func (f *fakeCoordinator) Throttle(_ context.Context, node string, share float64) error {
	f.throttled = append(f.throttled, node)
	return nil
}

func TestPollFollowsTheJobThatRestartedIt(t *testing.T) {
	start, end := t0, t0.Add(9*time.Second)
	f := &fakeCoordinator{jobs: map[string][]api.JobStatus{
		"a": {{ID: "a", State: api.JobRunning, Step: 5, Started: &start},
			{ID: "a", State: api.JobFailed, Step: 6, RestartedAs: "b", Started: &start}},
		"b": {{ID: "b", State: api.JobRunning, Step: 4, RestoredFrom: &api.CheckpointStatus{Step: 4}, Restarts: 1},
			{ID: "b", State: api.JobDone, Step: 10, Steps: 10, RestoredFrom: &api.CheckpointStatus{Step: 4}, Restarts: 1, Finished: &end}},
	}}
	tr := &trace{throttles: []throttle{{step: 5, node: 1, share: 0.1}}}
	if err := poll(context.Background(), f, "a", tr, time.Minute); err != nil {
		t.Fatalf("poll: %v", err)
	}
	if tr.final.ID != "b" || !tr.started.Equal(start) || !tr.finished.Equal(end) {
		t.Errorf("final %s, %v to %v; want b, from a's start to b's finish", tr.final.ID, tr.started, tr.finished)
	}
	if len(f.throttled) != 1 || f.throttled[0] != "n1" {
		t.Errorf("throttled %v, want n1 once", f.throttled)
	}
	rs := restarts(tr.samples)
	if len(rs) != 1 || rs[0].from != "a" || rs[0].to != "b" || rs[0].trainedTwice() != 2 {
		t.Errorf("restarts %+v; want a -> b, steps 5..6 trained twice", rs)
	}
}

func TestInterferenceRunsForItsOwnStepsAndThrottlesAt30And60Percent(t *testing.T) {
	m := models["ctrdnn"]
	ts := interferenceTraces(m, syncBSP, 500)
	if len(ts) != 2 || ts[0].mode != config.BatchingDynamic || ts[1].mode != config.BatchingUniform {
		t.Fatalf("%d traces: want dynamic and uniform", len(ts))
	}
	for _, tr := range ts {
		th := tr.throttles
		if tr.model.steps != 500 || len(th) != 2 || th[0].step != 150 || th[0].share != 0.25 || th[1].step != 300 || th[1].share != 0.5 {
			t.Errorf("%s: %d steps, throttles %+v; want 500 steps, n0 at 0.25 from 150 and back to 0.5 at 300", tr.mode, tr.model.steps, th)
		}
	}
	if ts := interferenceTraces(m, syncBSP, 0); ts[0].model.steps != m.steps {
		t.Errorf("steps 0: %d steps, want the model's %d", ts[0].model.steps, m.steps)
	}
}
