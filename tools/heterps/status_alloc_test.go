package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// TestStatusShowsTheJobsAllocation: `heterps status JOB` prints the
// allocator's fields of a job that has them, and no such line otherwise.
func TestStatusShowsTheJobsAllocation(t *testing.T) {
	s := api.JobStatus{ID: "j5", Name: "ctr", State: api.JobRunning, Steps: 100, Step: 40,
		Alloc: &api.JobAlloc{Units: 4, Loss: 0.4123, PredictedLoss: 0.41, Quality: 0.62, Target: 0.8, Priority: 2}}
	var out bytes.Buffer
	printJob(&out, s)
	want := "  allocator: 4 unit(s), loss 0.4123 (predicted 0.4100), quality 0.620 of target 0.800, priority 2\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant the line %q", out.String(), want)
	}
	s.Alloc = &api.JobAlloc{Units: 1, Loss: 0.7, Quality: 0.1, Priority: 1}
	out.Reset()
	printJob(&out, s)
	if want := "allocator: 1 unit(s), loss 0.7000 (no fit yet), quality 0.100, priority 1\n"; !strings.Contains(out.String(), want) {
		t.Errorf("no fit, no target:\n%s\nwant %q", out.String(), want)
	}
	s.Alloc = nil
	out.Reset()
	printJob(&out, s)
	if strings.Contains(out.String(), "allocator") {
		t.Errorf("a job without allocator fields:\n%s", out.String())
	}
}

// TestStatusShowsTheAllocatorsLastDecision: `heterps status` asks
// GET /v1/alloc and prints its last decision when the allocator runs,
// nothing about it when it is off.
func TestStatusShowsTheAllocatorsLastDecision(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 30, 5, 0, time.Local)
	for _, tc := range []struct {
		alloc api.AllocStatus
		want  string
	}{
		{api.AllocStatus{Policy: "quality", EpochMS: 2000, Epochs: 7, At: &at, DecisionMS: 1.25,
			Jobs: []api.AllocGrant{{JobID: "j1", Node: "n1", Units: 3, Was: 2, Quality: 0.5}, {JobID: "j2", Node: "n1", Units: 1, Was: 2, Quality: 0.25}}},
			"allocator quality, every 2s: decision 7 at 12:30:05 (1.2 ms): j1 3 unit(s) on n1 (was 2, quality 0.500); j2 1 unit(s) on n1 (was 2, quality 0.250)\n"},
		{api.AllocStatus{Policy: "fair", EpochMS: 500, Jobs: []api.AllocGrant{}}, "allocator fair, every 500ms: no decision yet\n"},
		{api.AllocStatus{Policy: "off", EpochMS: 2000, Jobs: []api.AllocGrant{}}, ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var v any
			switch r.URL.Path {
			case "/v1/jobs":
				v = []api.JobStatus{}
			case "/v1/nodes":
				v = []api.NodeStatus{}
			case "/v1/alloc":
				v = tc.alloc
			default:
				http.NotFound(w, r)
				return
			}
			json.NewEncoder(w).Encode(v)
		}))
		var out, errb bytes.Buffer
		code := runStatus(context.Background(), []string{"--coordinator", srv.URL}, &out, &errb)
		srv.Close()
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		got := out.String()
		if tc.want == "" {
			if strings.Contains(got, "allocator") {
				t.Errorf("allocator off:\n%s", got)
			}
		} else if !strings.Contains(got, tc.want) {
			t.Errorf("status:\n%s\nwant the line %q", got, tc.want)
		}
	}
}
