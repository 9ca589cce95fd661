package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

func TestStatusShowsTheBatchSplit(t *testing.T) {
	s := api.JobStatus{ID: "j3", Name: "dp", State: api.JobRunning, Steps: 100,
		Stages:   []api.StageStatus{{Nodes: []string{"fast", "slow"}, Batches: []int{820, 204}, StepSeconds: []float64{0.02, 0.021}}},
		Batching: &api.BatchingStatus{Mode: "dynamic", Adjustments: 2}}
	var out bytes.Buffer
	printJob(&out, s)
	if want := "batching dynamic, 2 adjustment(s): fast b=820 t=20.0ms; slow b=204 t=21.0ms"; !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant a line with %q", out.String(), want)
	}
}

func TestStatusShowsLanesAndWhyUniform(t *testing.T) {
	s := api.JobStatus{ID: "j4", Name: "pipe", State: api.JobRunning, Steps: 100,
		Stages: []api.StageStatus{{Stage: 0, Nodes: []string{"c0", "c1"}, Batches: []int{300, 212}},
			{Stage: 1, Nodes: []string{"g0", "g1"}, Batches: []int{300, 212}}},
		Batching: &api.BatchingStatus{Mode: "dynamic", Adjustments: 3, Restarts: 2, Lanes: 2}}
	var out bytes.Buffer
	printJob(&out, s)
	for _, want := range []string{"batching dynamic, 3 adjustment(s), 2 restart(s):", "stage 0: c0 b=300; c1 b=212", "stage 1: g0 b=300; g1 b=212"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status:\n%s\nwant %q", out.String(), want)
		}
	}
	s.Batching = &api.BatchingStatus{Mode: "uniform", Reason: "stages have [2 3] replicas"}
	out.Reset()
	printJob(&out, s)
	if want := "batching uniform (stages have [2 3] replicas):"; !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant %q", out.String(), want)
	}
}

// TestStatusSaysWhichNodesAJobAvoids: a job that shrank below its limit
// and does not grow back onto a node that came back says why — the node
// failed it and is avoided until a time — also while it waits to restart.
func TestStatusSaysWhichNodesAJobAvoids(t *testing.T) {
	until := time.Date(2026, 12, 6, 1, 49, 2, 0, time.UTC)
	for _, state := range []api.JobState{api.JobRunning, api.JobRestarting} {
		s := api.JobStatus{ID: "j1", Name: "dp", State: state, Steps: 100, Avoids: []api.AvoidedNode{{Node: "n0", Until: until}}}
		if state == api.JobRunning {
			s.Stages = []api.StageStatus{{Nodes: []string{"n1"}, Batches: []int{512}}}
		}
		var out bytes.Buffer
		printJob(&out, s)
		if want := "avoids node n0 until 2026-12-06T01:49:02Z"; !strings.Contains(out.String(), want) {
			t.Errorf("%s job's status:\n%s\nwant %q", state, out.String(), want)
		}
	}
}

// TestStatusListsNodes: `heterps status` lists the coordinator's nodes
// after its jobs, and takes --coordinator as host:port.
func TestStatusListsNodes(t *testing.T) {
	url := startCoordinator(t)
	var reg api.RegisterResponse
	postJSON(t, url, "/v1/nodes/register", api.RegisterRequest{Name: "gpu-7", DataAddr: "127.0.0.1:7001", Type: "cpu-2t", Units: 2,
		CPUShare: 1, CPUShareMode: api.CPUShareNone}, &reg)
	var out, errb bytes.Buffer
	hostPort := strings.TrimPrefix(url, "http://")
	if code := runStatus(context.Background(), []string{"--coordinator", hostPort}, &out, &errb); code != exitOK {
		t.Fatalf("status --coordinator %s: exit %d: %s", hostPort, code, errb.String())
	}
	var row string
	for line := range strings.Lines(out.String()) {
		if strings.HasPrefix(line, "gpu-7 ") {
			row = line
		}
	}
	f := strings.Fields(row)
	if len(f) < 7 || f[1] != reg.NodeID || f[2] != "cpu-2t" || f[3] != "2" || f[4] != "alive" || !strings.HasSuffix(f[5], "s") || f[6] != "ago" {
		t.Fatalf("no node row (name id type units state heartbeat tasks) in:\n%s", out.String())
	}
}

func TestHeartbeatAge(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	if got := heartbeatAge(now.Add(-3210*time.Millisecond), now); got != "3.2s ago" {
		t.Errorf("got %q", got)
	}
	if got := heartbeatAge(time.Time{}, now); got != "-" {
		t.Errorf("never: got %q", got)
	}
}

// TestStatusSaysWhereLayerTimesCameFrom: a job's status text says which
// types its plan's layer times were measured on, with the dense sync their
// profile folded in, and which estimated; its stage table says how each
// stage syncs.
func TestStatusSaysWhereLayerTimesCameFrom(t *testing.T) {
	plan, _ := json.Marshal(sched.Plan{Method: "exact", Feasible: true, Throughput: 10, Cost: 1, Stages: []sched.Stage{{Type: "cpu", Units: 1}},
		Sources:   map[string]string{"gpu": sched.SourceEstimated, "cpu": sched.SourceMeasured, "v100": sched.SourceEstimated},
		DenseSync: map[string]string{"cpu": "allreduce"}})
	var out bytes.Buffer
	printJob(&out, api.JobStatus{ID: "j1", Name: "ctr", State: api.JobRunning, Plan: plan,
		Stages: []api.StageStatus{{Stage: 0, Type: "cpu", Units: 2, DenseSync: "allreduce", Nodes: []string{"a", "b"}}}})
	if want := "  layer times: measured on cpu (allreduce sync); estimated (roofline) on gpu, v100\n"; !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant %q", out.String(), want)
	}
	if !strings.Contains(out.String(), "dense sync") || !strings.Contains(strings.Join(strings.Fields(out.String()), " "), "cpu 2 allreduce") {
		t.Errorf("the stage table does not say how the stage syncs:\n%s", out.String())
	}
}

func TestStatusListsStoredProfiles(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)
	var out bytes.Buffer
	printProfileList(&out, []api.Profile{{Model: "ctrdnn", Type: "cpu-1t", Layers: 7, ProfileBatch: 256, StoredAt: at}})
	if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), "profile type layers B_o stored ctrdnn cpu-1t 7 256 2026-03-01 12:00:00") {
		t.Errorf("profiles:\n%s", out.String())
	}
	out.Reset()
	if printProfileList(&out, nil); out.Len() != 0 {
		t.Errorf("no profiles printed %q", out.String())
	}
}

// A job's progress shows nothing until it has trained a step: a restored
// job starts at its checkpoint's step, with no loss or rate yet.
func TestJobProgressWaitsForAStep(t *testing.T) {
	var out strings.Builder
	update, done := jobProgress(&out)
	restored := &api.CheckpointStatus{Step: 1800}
	update(api.JobStatus{Step: 1800, Steps: 4000, RestoredFrom: restored})
	if out.Len() != 0 {
		t.Fatalf("before any step: %q", out.String())
	}
	update(api.JobStatus{Step: 1820, Steps: 4000, Loss: 0.5, SamplesPerS: 1000, RestoredFrom: restored})
	done()
	if got := out.String(); !strings.Contains(got, "step 1820/4000  loss 0.5000  1000 samples/s") || strings.Contains(got, "1800/") {
		t.Fatalf("progress: %q", got)
	}
}

// A job's progress says, once each, which checkpoints were not written and
// how long the trained job waits for its last one; the job's status says
// the same.
func TestJobProgressSaysWhatCheckpointsFail(t *testing.T) {
	var out strings.Builder
	update, done := jobProgress(&out)
	full := func(step int64) *api.CheckpointFailure {
		return &api.CheckpointFailure{Step: step, Node: "n0", Error: "no space left on device"}
	}
	by := time.Date(2026, 12, 7, 18, 30, 0, 0, time.Local)
	update(api.JobStatus{Step: 10, Steps: 20, Loss: 0.5, SamplesPerS: 100, State: api.JobRunning})
	update(api.JobStatus{Step: 12, Steps: 20, Loss: 0.5, SamplesPerS: 100, State: api.JobRunning, CheckpointFailure: full(10)})
	update(api.JobStatus{Step: 14, Steps: 20, Loss: 0.5, SamplesPerS: 100, State: api.JobRunning, CheckpointFailure: full(10)})
	waiting := api.JobStatus{Step: 20, Steps: 20, Loss: 0.5, SamplesPerS: 100, State: api.JobRunning, CheckpointFailure: full(20), FinalCheckpointBy: &by}
	update(waiting)
	update(waiting)
	done()
	got := out.String()
	for _, want := range []string{
		"checkpoint of step 10 NOT WRITTEN (n0): no space left on device; training goes on",
		"checkpoint of step 20 NOT WRITTEN (n0): no space left on device; it is the last step's: tried again every few seconds until 18:30:00",
		"18:30:00", // the failure's note gives the deadline; the wait's would repeat it
	} {
		if strings.Count(got, want) != 1 {
			t.Errorf("progress says %q %d times, want once:\n%s", want, strings.Count(got, want), got)
		}
	}
	var status strings.Builder
	waiting.Stages = []api.StageStatus{{Stage: 0, Type: "cpu-1t", Units: 1}}
	printJob(&status, waiting)
	if !strings.Contains(status.String(), "tried again every few seconds until 18:30:00") || strings.Count(status.String(), "18:30:00") != 1 {
		t.Errorf("status of the job waiting for its failed last checkpoint:\n%s", status.String())
	}
}

// A trained job waiting for its last checkpoint, none failed, says until
// when, once, in its progress and its status.
func TestJobProgressSaysTheFinalCheckpointWait(t *testing.T) {
	var out strings.Builder
	update, done := jobProgress(&out)
	by := time.Date(2026, 12, 7, 18, 30, 0, 0, time.Local)
	waiting := api.JobStatus{Step: 20, Steps: 20, Loss: 0.5, SamplesPerS: 100, State: api.JobRunning, FinalCheckpointBy: &by}
	update(waiting)
	update(waiting)
	done()
	want := "trained all 20 steps: waiting for the checkpoint of step 20 until 18:30:00"
	if strings.Count(out.String(), want) != 1 {
		t.Errorf("progress says %q %d times, want once:\n%s", want, strings.Count(out.String(), want), out.String())
	}
	var status strings.Builder
	waiting.Stages = []api.StageStatus{{Stage: 0, Type: "cpu-1t", Units: 1}}
	printJob(&status, waiting)
	if strings.Count(status.String(), want) != 1 {
		t.Errorf("status of the waiting job:\n%s", status.String())
	}
}

// A running job's seconds are those since it started (its status has no
// finish yet), a finished one's from start to finish.
func TestResultSecondsOfARunningJob(t *testing.T) {
	started := time.Now().Add(-90 * time.Second)
	r, err := resultOf(api.JobStatus{ID: "j1", State: api.JobRunning, Started: &started})
	if err != nil || r.Seconds < 89 || r.Seconds > 120 {
		t.Errorf("running for 90 s: %.1f s (%v)", r.Seconds, err)
	}
	finished := started.Add(30 * time.Second)
	if r, _ := resultOf(api.JobStatus{ID: "j1", State: api.JobDone, Started: &started, Finished: &finished}); r.Seconds != 30 {
		t.Errorf("done after 30 s: %.1f s", r.Seconds)
	}
}

// The job list names the restart that carries a restarted job on.
func TestJobListNamesTheRestart(t *testing.T) {
	var out bytes.Buffer
	printJobList(&out, []api.JobStatus{{ID: "j1", Name: "n", State: api.JobFailed, RestartedAs: "j2"}, {ID: "j2", Name: "n", State: api.JobRunning}})
	if !strings.Contains(out.String(), "failed -> j2") || strings.Count(out.String(), "->") != 1 {
		t.Errorf("job list:\n%s", out.String())
	}
}
