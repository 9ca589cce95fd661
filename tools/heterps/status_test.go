package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/api"
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
