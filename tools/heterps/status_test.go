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
