package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/daemon/api"
)

// TestCancelAQueuedJob submits a job to a coordinator with no nodes (it
// queues), cancels it with a signed `heterps cancel`, and checks that a
// repeated cancel is harmless, that an unsigned one is refused, and that
// a failed job and an unknown one cannot be cancelled.
func TestCancelAQueuedJob(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	secret := "0123456789abcdef0123456789abcdef"
	url := startCoordinatorWith(t, []byte(secret))
	dir := t.TempDir()
	key := filepath.Join(dir, "secret")
	if err := os.WriteFile(key, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HETERPS_SECRET_FILE", "")
	ctx := context.Background()
	cli := func(run func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append(args, "--coordinator", url, "--secret-file", key), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, errb := cli(runSubmit, "../../config/examples/jobs/ctrdnn-local.toml"); code != exitOK || strings.TrimSpace(out) != "j1" {
		t.Fatalf("submit: exit %d, %q, %s", code, out, errb)
	}
	// A submitted job is pending until the coordinator's next pass queues it.
	code, status, _ := cli(runStatus, "j1")
	for deadline := time.Now().Add(10 * time.Second); code == exitOK && strings.Contains(status, ": pending") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		code, status, _ = cli(runStatus, "j1")
	}
	if code != exitOK || !strings.Contains(status, "queued") {
		t.Fatalf("the job does not queue on a coordinator with no nodes:\n%s", status)
	}

	var out, errb bytes.Buffer
	if code := runCancel(ctx, []string{"j1", "--coordinator", url}, &out, &errb); code != exitFailure || !strings.Contains(errb.String(), "401") {
		t.Fatalf("unsigned cancel: exit %d, stderr %s", code, errb.String())
	}
	if code, out, errb := cli(runCancel, "j1"); code != exitOK || !strings.Contains(out, "job j1: cancelled at step 0/") || !strings.Contains(out, "no complete checkpoint") {
		t.Fatalf("cancel: exit %d, %q, %s", code, out, errb)
	}
	if code, out, _ := cli(runStatus, "j1"); code != exitOK || !strings.Contains(out, "cancelled") {
		t.Fatalf("status after the cancel:\n%s", out)
	}
	code, js, errs := cli(runCancel, "j1", "--json")
	var s api.JobStatus
	if err := json.Unmarshal([]byte(js), &s); code != exitOK || err != nil || s.State != api.JobCancelled {
		t.Fatalf("a second cancel: exit %d, %+v (%v), %s", code, s, err, errs)
	}

	infeasible := filepath.Join(dir, "job.toml")
	src, err := os.ReadFile("../../config/examples/jobs/ctrdnn-local.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(infeasible, []byte(strings.Replace(string(src), "throughput_limit = 0", "throughput_limit = 1e15", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errb := cli(runSubmit, infeasible, "--wait"); code != exitInfeasible {
		t.Fatalf("submit --wait of an infeasible job: exit %d, %s", code, errb)
	}
	if code, _, errb := cli(runCancel, "j2"); code != exitFailure || !strings.Contains(errb, "job j2 is already failed") || !strings.Contains(errb, "nothing to cancel") {
		t.Errorf("cancel of a failed job: exit %d, %s", code, errb)
	}
	if code, _, errb := cli(runCancel, "j9"); code != exitFailure || !strings.Contains(errb, "404") {
		t.Errorf("cancel of an unknown job: exit %d, %s", code, errb)
	}
	for _, args := range [][]string{nil, {""}, {"j1", "j2"}} {
		if code, _, errb := cli(runCancel, args...); code != exitUsage || !strings.Contains(errb, "want one JOB") {
			t.Errorf("cancel %q: exit %d, %s", args, code, errb)
		}
	}
}

// TestCancelFollowsTheRestart: cancelling a job that failed and was
// restarted cancels its restart; when that restart fails over again
// between the look-up and the cancel (409), cancel looks again and
// cancels the newest one.
func TestCancelFollowsTheRestart(t *testing.T) {
	var mu sync.Mutex
	statuses := map[string]api.JobStatus{
		"j1": {ID: "j1", State: api.JobFailed, Reason: "node b died; restarted from step 40 as job j2", RestartedAs: "j2"},
		"j2": {ID: "j2", State: api.JobRunning, Step: 70, Steps: 100, RestartOf: "j1"},
		"j3": {ID: "j3", State: api.JobRunning, Step: 90, Steps: 100, RestartOf: "j2",
			Checkpoint: &api.CheckpointStatus{Step: 80, Dir: "/ck/step-80"}},
	}
	var deleted []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		id := strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
		s, ok := statuses[id]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		if r.Method == http.MethodDelete {
			deleted = append(deleted, id)
			if id == "j2" { // j2 fails over to j3 just before the cancel
				statuses["j2"] = api.JobStatus{ID: "j2", State: api.JobFailed, RestartedAs: "j3", RestartOf: "j1"}
				w.WriteHeader(http.StatusConflict)
				json.NewEncoder(w).Encode(api.Error{Error: "job j2 is already failed"})
				return
			}
			s.State = api.JobCancelled
			statuses[id] = s
		}
		json.NewEncoder(w).Encode(s)
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := runCancel(context.Background(), []string{"j1", "--coordinator", srv.URL}, &out, &errb); code != exitOK {
		t.Fatalf("cancel: exit %d: %s", code, errb.String())
	}
	if strings.Join(deleted, ",") != "j2,j3" {
		t.Errorf("cancelled %v, want j2 (refused: it restarted) then j3", deleted)
	}
	want := "job j3 (the restart of j1): cancelled at step 90/100; latest checkpoint: step 80 in /ck/step-80"
	if !strings.Contains(out.String(), want) {
		t.Errorf("cancel says %q, want %q", out.String(), want)
	}
	if statuses["j1"].State != api.JobFailed {
		t.Errorf("the job asked for changed: %+v", statuses["j1"])
	}
}

// TestCancelRefusesARestartLoop: a chain whose restarts lead back to a job
// already seen is an error, not an endless walk.
func TestCancelRefusesARestartLoop(t *testing.T) {
	statuses := map[string]api.JobStatus{
		"j1": {ID: "j1", State: api.JobFailed, RestartedAs: "j2"},
		"j2": {ID: "j2", State: api.JobFailed, RestartedAs: "j1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("%s %s on a looping chain", r.Method, r.URL.Path)
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		json.NewEncoder(w).Encode(statuses[strings.TrimPrefix(r.URL.Path, "/v1/jobs/")])
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := runCancel(context.Background(), []string{"j1", "--coordinator", srv.URL}, &out, &errb); code != exitFailure || !strings.Contains(errb.String(), "loop back to job j1") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
}
