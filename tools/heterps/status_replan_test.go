package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/api"
)

func TestStatusShowsReplans(t *testing.T) {
	s := api.JobStatus{ID: "j2", Name: "ctr", State: api.JobRunning, Step: 120, Steps: 200,
		Replan: &api.ReplanStatus{Scales: map[string]float64{"gpu": 1, "cpu": 0.5}, Samples: 31, MeasuredCost: 0.00044,
			FirstPlanCost: 3e-5, FirstPlanTotal: 5e-5, MoveSeconds: 0.12,
			Replans: []api.Replan{{Job: "j1", Step: 14, FromStep: 10, OldCost: 4.667e-5, NewCost: 4.421e-5, Gain: 0.0526,
				Scales:    map[string]float64{"cpu": 0.509, "gpu": 1},
				OldAssign: []string{"gpu", "gpu", "cpu"}, OldUnits: []int{1, 2}, NewAssign: []string{"cpu", "cpu", "cpu"}, NewUnits: []int{1},
				Move: "restart", NewJob: "j2"}}}}
	var out bytes.Buffer
	printJob(&out, s)
	for _, want := range []string{
		"re-planning: factors cpu x0.5, gpu x1 (31 measurement(s)); cost so far 0.00044 measured, 3e-05 by the first plan (5e-05 for the run); move start-up 0.12 s",
		"14    10    restart  4.667e-05  4.421e-05  5.3%  cpu x0.509, gpu x1  gpu[0-1]:1 cpu[2-2]:2 -> cpu[0-2]:1  j1 -> j2",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status:\n%s\nwant %q", out.String(), want)
		}
	}
	s.Replan = nil
	out.Reset()
	printJob(&out, s)
	if strings.Contains(out.String(), "re-planning") {
		t.Errorf("a job without [replan] shows re-planning:\n%s", out.String())
	}
}
