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
		add      []api.NewReplica
	}{
		{"drop c", three, []string{"a", "b"}, []int{0, 1}, []int{256, 256}, "", nil},
		{"drop b, in proportion", three, []string{"c", "a"}, []int{0, 2}, []int{257, 255}, "", nil},
		{"batches given, by id", three, []string{"r1=500", "c=12"}, []int{1, 2}, []int{500, 12}, "", nil},
		{"batches off the job's", three, []string{"a=300", "b=200"}, nil, nil, "add up to 500; the job's batch is 512", nil},
		{"some batches", three, []string{"a=300", "b"}, nil, nil, "a batch for 1 of the 2 replicas", nil},
		{"a node without a replica adds one", three, []string{"x=100", "a=412"}, []int{0}, []int{412}, "", []api.NewReplica{{Node: "x", Batch: 100}}},
		{"added, in proportion", api.StageStatus{Nodes: []string{"a", "b"}, Replicas: []int{0, 1}, Batches: []int{300, 212}}, []string{"a", "b", "x"},
			[]int{0, 1}, []int{200, 141}, "", []api.NewReplica{{Node: "x", Batch: 171}}}, // weights 300, 212 and the mean 256
		{"added twice", three, []string{"x", "x"}, nil, nil, "node x named twice", nil},
		{"unknown id", three, []string{"r7"}, nil, nil, `no replica "r7"`, nil},
		{"twice", three, []string{"a", "r0"}, nil, nil, "replica r0 named twice", nil},
		{"zero batch", three, []string{"a=0", "b=512"}, nil, nil, "whole number >= 1", nil},
		{"two replicas on a node", twoOnA, []string{"a"}, nil, nil, "node a runs 2 replicas; name them as rK", nil},
		{"one of them by id", twoOnA, []string{"r5"}, []int{5}, []int{2}, "", nil},
		{"more replicas than rows", api.StageStatus{Nodes: []string{"a", "b", "c"}, Replicas: []int{0, 1, 2}, Batches: []int{1, 1, 0}},
			[]string{"a", "b", "c"}, nil, nil, "leaves a replica no rows", nil},
		{"no replica ids", api.StageStatus{Nodes: []string{"a"}, Batches: []int{4}}, []string{"a"}, nil, nil, "names no replica ids", nil},
	} {
		req, err := resizeRequest(tc.specs, tc.st)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %+v, %v; want an error saying %q", tc.name, req, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(req.Replicas, tc.replicas) || !slices.Equal(req.Batches, tc.batches) || !slices.Equal(req.Add, tc.add)):
			t.Errorf("%s: %+v, %v; want replicas %v batches %v, added %v", tc.name, req, err, tc.replicas, tc.batches, tc.add)
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
			if len(req.Add) > 0 && len(patched) < 4 { // a grow is refused until the replicas report the latest change
				w.Header().Set("Content-Type", api.ContentTypeJSON)
				w.WriteHeader(http.StatusConflict)
				json.NewEncoder(w).Encode(api.Error{Error: "grow job j2: replica 0 has not reported its data position yet; try again in a few heartbeats"})
				return
			}
			s.Stages = []api.StageStatus{{Nodes: []string{"n1"}, Replicas: req.Replicas, Batches: req.Batches}}
			for _, a := range req.Add {
				st := &s.Stages[0]
				st.Nodes, st.Replicas, st.Batches = append(st.Nodes, a.Node), append(st.Replicas, 2), append(st.Batches, a.Batch)
			}
			if len(req.Add) > 0 {
				s.JoiningAt = 1401
			}
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
	if len(patched) != 1 {
		t.Errorf("%d PATCHes, want the one", len(patched))
	}
	out.Reset()
	if code := runResize(context.Background(), []string{"j2", "n1=300", "n7=212", "--coordinator", srv.URL}, &out, &errb); code != exitOK {
		t.Fatalf("resize adding a replica on n7: exit %d: %s", code, errb.String())
	}
	if len(patched) != 4 || !slices.Equal(patched[3].Add, []api.NewReplica{{Node: "n7", Batch: 212}}) || !slices.Equal(patched[3].Replicas, []int{1}) {
		t.Errorf("PATCHed %+v; want the grow sent until it was taken (3 times), adding n7 with 212", patched[1:])
	}
	if want := "n7 (r2) b=212 from step 1401, when the added replicas join"; !strings.Contains(out.String(), want) {
		t.Errorf("resize says %q, want it to name %q", out.String(), want)
	}
}
