package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/heterps/heterps/daemon/api"
)

// resizeRequest maps node names and rK to replica ids, keeps the job's
// batch (split in proportion to the batches now when none is given) and
// refuses what the coordinator would train wrong or not at all.
func TestResizeRequest(t *testing.T) {
	three := api.StageStatus{Nodes: []string{"a", "b", "c"}, Replicas: []int{0, 1, 2}, Batches: []int{171, 171, 170}}
	twoOnA := api.StageStatus{Nodes: []string{"a", "a"}, Replicas: []int{3, 5}, Batches: []int{1, 1}}
	for _, tc := range []struct {
		name     string
		st       api.StageStatus
		specs    []string
		replicas []int
		batches  []int
		err      string
	}{
		{"drop c", three, []string{"a", "b"}, []int{0, 1}, []int{256, 256}, ""},
		{"drop b, in proportion", three, []string{"c", "a"}, []int{0, 2}, []int{257, 255}, ""},
		{"batches given, by id", three, []string{"r1=500", "c=12"}, []int{1, 2}, []int{500, 12}, ""},
		{"batches off the job's", three, []string{"a=300", "b=200"}, nil, nil, "add up to 500; the job's batch is 512"},
		{"some batches", three, []string{"a=300", "b"}, nil, nil, "a batch for 1 of the 2 replicas"},
		{"unknown node", three, []string{"x"}, nil, nil, `no replica "x"; the stage runs a (r0) b=171`},
		{"unknown id", three, []string{"r7"}, nil, nil, `no replica "r7"`},
		{"twice", three, []string{"a", "r0"}, nil, nil, "replica r0 named twice"},
		{"zero batch", three, []string{"a=0", "b=512"}, nil, nil, "whole number >= 1"},
		{"two replicas on a node", twoOnA, []string{"a"}, nil, nil, "node a runs 2 replicas; name them as rK"},
		{"one of them by id", twoOnA, []string{"r5"}, []int{5}, []int{2}, ""},
		{"more replicas than rows", api.StageStatus{Nodes: []string{"a", "b", "c"}, Replicas: []int{0, 1, 2}, Batches: []int{1, 1, 0}},
			[]string{"a", "b", "c"}, nil, nil, "leaves a replica no rows"},
		{"no replica ids", api.StageStatus{Nodes: []string{"a"}, Batches: []int{4}}, []string{"a"}, nil, nil, "names no replica ids"},
	} {
		req, err := resizeRequest(tc.specs, tc.st)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %+v, %v; want an error saying %q", tc.name, req, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(req.Replicas, tc.replicas) || !slices.Equal(req.Batches, tc.batches)):
			t.Errorf("%s: %+v, %v; want replicas %v batches %v", tc.name, req, err, tc.replicas, tc.batches)
		}
	}
}

// TestResizeCommand: `heterps resize` follows a restarted job to its live
// restart, sends the PATCH the arguments mean, and prints the new split;
// a job that is not running is refused before any PATCH.
func TestResizeCommand(t *testing.T) {
	var mu sync.Mutex
	stage := api.StageStatus{Nodes: []string{"n0", "n1"}, Replicas: []int{0, 1}, Batches: []int{256, 256}}
	statuses := map[string]api.JobStatus{
		"j1": {ID: "j1", State: api.JobFailed, RestartedAs: "j2"},
		"j2": {ID: "j2", State: api.JobRunning, Stages: []api.StageStatus{stage}},
		"j3": {ID: "j3", State: api.JobDone, Stages: []api.StageStatus{stage}},
	}
	var patched []api.ResizeRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		id := strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
		s := statuses[id]
		if r.Method == http.MethodPatch {
			var req api.ResizeRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				t.Errorf("PATCH body: %v", err)
			}
			patched = append(patched, req)
			s.Stages = []api.StageStatus{{Nodes: []string{"n1"}, Replicas: req.Replicas, Batches: req.Batches}}
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		json.NewEncoder(w).Encode(s)
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := runResize(context.Background(), []string{"j1", "n1", "--coordinator", srv.URL}, &out, &errb); code != exitOK {
		t.Fatalf("resize: exit %d: %s", code, errb.String())
	}
	if len(patched) != 1 || !slices.Equal(patched[0].Replicas, []int{1}) || !slices.Equal(patched[0].Batches, []int{512}) {
		t.Errorf("PATCHed %+v, want replica 1 alone with the whole batch", patched)
	}
	if want := "job j2: stage 0 now runs n1 (r1) b=512 from its next step"; !strings.Contains(out.String(), want) {
		t.Errorf("resize says %q, want %q", out.String(), want)
	}
	errb.Reset()
	if code := runResize(context.Background(), []string{"j3", "n1", "--coordinator", srv.URL}, &out, &errb); code != exitFailure || !strings.Contains(errb.String(), "job j3 is done") {
		t.Errorf("resize of a done job: exit %d: %s", code, errb.String())
	}
	if code := runResize(context.Background(), []string{"j2", "--coordinator", srv.URL}, &out, &errb); code != exitUsage {
		t.Errorf("resize without a replica: exit %d", code)
	}
	errb.Reset()
	if code := runResize(context.Background(), []string{"j2", "n7", "--coordinator", srv.URL}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), `job j2: no replica "n7"`) {
		t.Errorf("resize naming no replica of the job: exit %d: %s", code, errb.String())
	}
	if len(patched) != 1 {
		t.Errorf("%d PATCHes, want the one", len(patched))
	}
}
