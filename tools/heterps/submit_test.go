package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/coord"
)

// startCoordinator serves a coordinator with no nodes until the test ends.
func startCoordinator(t *testing.T) string {
	t.Helper()
	return startCoordinatorWith(t, nil)
}

// startCoordinatorWith is startCoordinator requiring requests signed with
// secret, if not nil.
func startCoordinatorWith(t *testing.T, secret []byte) string {
	t.Helper()
	cat, err := config.LoadCatalog("../../config/examples/catalogs/local.toml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := coord.New(coord.Config{Catalog: cat, ControlSecret: secret, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Serve(ctx, ln) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return "http://" + ln.Addr().String()
}

// TestSubmitAndStatus submits a job no cluster of the catalog can run (its
// throughput floor is out of reach): it is accepted, then fails, which
// submit --wait and status both show.
func TestSubmitAndStatus(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after the coordinator stops
	url := startCoordinator(t)
	src, err := os.ReadFile("../../config/examples/jobs/ctrdnn-local.toml")
	if err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(job, []byte(strings.Replace(string(src), "throughput_limit = 0", "throughput_limit = 1e15", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out, errb bytes.Buffer
	if code := runSubmit(ctx, []string{job, "--coordinator", url}, &out, &errb); code != exitOK || strings.TrimSpace(out.String()) != "j1" {
		t.Fatalf("submit: exit %d, stdout %q, stderr %s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := runSubmit(ctx, []string{job, "--coordinator", url, "--wait", "--json"}, &out, &errb); code != exitInfeasible {
		t.Fatalf("submit --wait: exit %d, stdout %s, stderr %s", code, out.String(), errb.String())
	}
	var r runResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Job != "j2" || r.State != api.JobFailed || !strings.Contains(r.Reason, "no feasible plan") {
		t.Fatalf("submit --wait --json: %+v (%v)", r, err)
	}
	out.Reset()
	if code := runStatus(ctx, []string{"j2", "--coordinator", url}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "job j2 (ctrdnn-local): failed") {
		t.Errorf("status j2: exit %d:\n%s", code, out.String())
	}
	out.Reset()
	if code := runStatus(ctx, []string{"--coordinator", url, "--json"}, &out, &errb); code != exitOK {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	var jobs []api.JobStatus
	if err := json.Unmarshal(out.Bytes(), &jobs); err != nil || len(jobs) != 2 {
		t.Errorf("status --json: %d jobs (%v):\n%s", len(jobs), err, out.String())
	}
	if code := runStatus(ctx, []string{"j9", "--coordinator", url}, &out, &errb); code != exitFailure || !strings.Contains(errb.String(), "404") {
		t.Errorf("status of an unknown job: exit %d, stderr %s", code, errb.String())
	}
}

func TestSubmitRejectsBadJobFile(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runSubmit(context.Background(), []string{"../../config/examples/catalogs/local.toml"}, &out, &errb); code != exitUsage {
		t.Errorf("a catalog as a job: exit %d (%s)", code, errb.String())
	}
}

// A job file only the coordinator can fault (its model file is broken) is
// refused in terms of the file the user gave, not the coordinator's
// stand-in name.
func TestSubmitErrorsNameTheJobFile(t *testing.T) {
	url := startCoordinator(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "broken.toml"), []byte("version = 1\nname = \"b\"\ntask = \"ctr\"\n[input]\ndense = 2\nslots = 1\nvocab = 10\n[[layer]]\nkind = \"dense\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(dir, "my job.toml")
	if err := os.WriteFile(job, []byte("version = 1\nmodel = \"broken.toml\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := runSubmit(context.Background(), []string{job, "--coordinator", url}, &out, &errb)
	if want := job + ":2:1: model: "; code != exitUsage || !strings.Contains(errb.String(), want) || !strings.Contains(errb.String(), "loss.kind: missing") {
		t.Fatalf("exit %d, stderr %s, want %q and the model's fault", code, errb.String(), want)
	}
	// A name the coordinator would refuse (a newline in it) is not sent:
	// the job is judged all the same, under the stand-in name.
	odd := filepath.Join(dir, "odd\nname.toml")
	if err := os.Rename(job, odd); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	code = runSubmit(context.Background(), []string{odd, "--coordinator", url}, &out, &errb)
	if code != exitUsage || !strings.Contains(errb.String(), "job.toml:2:1: model: ") || !strings.Contains(errb.String(), "loss.kind: missing") {
		t.Fatalf("exit %d, stderr %s, want the model's fault in job.toml", code, errb.String())
	}
}

// TestWaitFollowsARestart: waiting on a job that failed and was restarted
// as another follows the restart to its end and says so.
func TestWaitFollowsARestart(t *testing.T) {
	statuses := map[string]api.JobStatus{
		"j1": {ID: "j1", State: api.JobFailed, Reason: "node b died; restarted from step 40 as job j2", RestartedAs: "j2"},
		"j2": {ID: "j2", State: api.JobDone, Step: 100, Steps: 100, RestartOf: "j1", Restarts: 1},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := statuses[strings.TrimPrefix(r.URL.Path, "/v1/jobs/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		json.NewEncoder(w).Encode(s)
	}))
	defer srv.Close()
	c := newCoordClient(srv.URL)
	defer c.close()
	var notes bytes.Buffer
	s, err := c.waitJob(context.Background(), "j1", func(api.JobStatus) {}, &notes)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "j2" || s.State != api.JobDone {
		t.Fatalf("waited to %s %s, want j2 done", s.ID, s.State)
	}
	if !strings.Contains(notes.String(), "following job j2") {
		t.Errorf("notice %q does not name the restart", notes.String())
	}
}

// TestSubmitAndStatusSignWithTheSecret: a coordinator that requires
// signed requests refuses an unsigned submit with 401 and takes one signed
// with --secret-file; status signs too.
func TestSubmitAndStatusSignWithTheSecret(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	secret := "0123456789abcdef0123456789abcdef"
	url := startCoordinatorWith(t, []byte(secret))
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HETERPS_SECRET_FILE", "")
	job := "../../config/examples/jobs/ctrdnn-local.toml"
	ctx := context.Background()
	var out, errb bytes.Buffer
	if code := runSubmit(ctx, []string{job, "--coordinator", url}, &out, &errb); code == exitOK || !strings.Contains(errb.String(), "401") {
		t.Fatalf("unsigned submit: exit %d, stderr %s", code, errb.String())
	}
	if code := runSubmit(ctx, []string{job, "--coordinator", url, "--secret-file", path}, &out, &errb); code != exitOK || strings.TrimSpace(out.String()) != "j1" {
		t.Fatalf("signed submit: exit %d, stdout %q, stderr %s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := runStatus(ctx, []string{"j1", "--coordinator", url, "--secret-file", path}, &out, &errb); code != exitOK {
		t.Errorf("signed status: exit %d: %s", code, errb.String())
	}
}
