package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/syncbuf"
)

// fakeAsks is a coordinator stand-in for one running job, j1: an ask of
// a checkpoint answers askStatus (or askErr), and each look-up of the job
// after the first ask answers the next of statuses, then the last one
// again.
type fakeAsks struct {
	mu        sync.Mutex
	asks      int
	askStatus api.JobStatus
	askErr    int // an HTTP status to refuse the ask with
	statuses  []api.JobStatus
	// restarted makes j1 a failed job that j2 restarted: j2 then answers
	// as j1 does otherwise.
	restarted bool
}

func (f *fakeAsks) serve(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var reply any
		live := "/v1/jobs/j1"
		if f.restarted {
			live = "/v1/jobs/j2"
		}
		switch {
		case f.restarted && r.Method == http.MethodGet && r.URL.Path == "/v1/jobs/j1":
			reply = api.JobStatus{ID: "j1", State: api.JobFailed, RestartedAs: "j2"}
		case r.Method == http.MethodPost && r.URL.Path == live+"/checkpoint":
			f.asks++
			if f.askErr != 0 {
				w.WriteHeader(f.askErr)
				reply = api.Error{Error: "job j1 has no checkpoint.dir to write a checkpoint into"}
				break
			}
			reply = f.askStatus
		case r.Method == http.MethodGet && r.URL.Path == live && f.asks == 0:
			reply = running(5, nil, nil) // the look-up before the ask
		case r.Method == http.MethodGet && r.URL.Path == live:
			reply = f.statuses[0]
			if len(f.statuses) > 1 {
				f.statuses = f.statuses[1:]
			}
		default:
			w.WriteHeader(http.StatusNotFound)
			reply = api.Error{Error: "not here"}
		}
		if js, ok := reply.(api.JobStatus); ok && f.restarted && r.URL.Path != "/v1/jobs/j1" {
			js.ID = "j2"
			reply = js
		}
		json.NewEncoder(w).Encode(reply)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func running(step int64, asked *api.CheckpointAsked, latest *api.CheckpointStatus) api.JobStatus {
	return api.JobStatus{ID: "j1", State: api.JobRunning, Step: step, Steps: 1000, CheckpointAsked: asked, Checkpoint: latest}
}

// TestCheckpointWaitsForTheStepAskedFor: `heterps checkpoint JOB` asks
// for a checkpoint (of the job that restarted JOB, if one did) and waits
// until one of that step or later is complete, asking again when a
// restarted coordinator forgot the ask; it fails, saying why, when the
// ask closes without one or the coordinator refuses it, and with
// --wait=false says the step asked for.
func TestCheckpointWaitsForTheStepAskedFor(t *testing.T) {
	asked := &api.CheckpointAsked{Step: 40, Tries: 1}
	old := &api.CheckpointStatus{Step: 30, Dir: "/ckpt/step-30"}
	done := &api.CheckpointStatus{Step: 40, Dir: "/ckpt/step-0000000040"}
	failed := running(60, nil, old)
	failed.CheckpointFailure = &api.CheckpointFailure{Step: 50, Error: "skipped: training passed the step asked for"}
	ended := running(60, nil, old)
	ended.State, ended.Reason = api.JobFailed, "node b missed heartbeats"
	for _, c := range []struct {
		name     string
		fake     *fakeAsks
		args     []string
		code     int
		out, err string
	}{
		{"written", &fakeAsks{askStatus: running(10, asked, old), statuses: []api.JobStatus{running(20, asked, old), running(45, nil, done)}},
			nil, exitOK, "job j1: checkpoint of step 40 written in /ckpt/step-0000000040", ""},
		{"restarted", &fakeAsks{restarted: true, askStatus: running(10, asked, old), statuses: []api.JobStatus{running(45, nil, done)}},
			nil, exitOK, "job j2: checkpoint of step 40 written", ""},
		{"not waited for", &fakeAsks{askStatus: running(10, asked, old)}, []string{"--wait=false"}, exitOK, "checkpoint asked for at step 40 (now at step 10)", ""},
		{"given up", &fakeAsks{askStatus: running(10, asked, old), statuses: []api.JobStatus{failed}}, nil, exitFailure, "", "could not be taken: step 50: skipped"},
		{"job ended", &fakeAsks{askStatus: running(10, asked, old), statuses: []api.JobStatus{ended}}, nil, exitFailure, "", "ended (failed: node b missed heartbeats) before a checkpoint of step 40"},
		{"forgotten", &fakeAsks{askStatus: running(10, asked, old), statuses: []api.JobStatus{running(20, nil, old)}}, nil, exitFailure, "", "forgot the ask 3 times"},
		{"forgotten once", &fakeAsks{askStatus: running(10, asked, old), statuses: []api.JobStatus{running(20, nil, old), running(30, asked, old), running(45, nil, done)}},
			nil, exitOK, "job j1: checkpoint of step 40 written", ""},
		{"no dir", &fakeAsks{askErr: http.StatusConflict}, nil, exitFailure, "", "has no checkpoint.dir"},
		{"timed out", &fakeAsks{askStatus: running(10, asked, old), statuses: []api.JobStatus{running(20, asked, old)}}, []string{"--timeout", "300ms"},
			exitFailure, "", "no checkpoint of step 40 or later yet"},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := c.fake.serve(t)
			var out, errb bytes.Buffer
			code := runCheckpoint(context.Background(), append([]string{"j1", "--coordinator", url}, c.args...), &out, &errb)
			if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, %q, %q", code, out.String(), errb.String(), c.code, c.out, c.err)
			}
			c.fake.mu.Lock()
			defer c.fake.mu.Unlock()
			if want := map[string]int{"forgotten": 1 + maxReasks, "forgotten once": 2}[c.name]; want > 0 && c.fake.asks != want {
				t.Errorf("%d asks, want %d: the first and one for each time the coordinator forgot it", c.fake.asks, want)
			}
		})
	}
}

// TestAskOnSignalsAsksWithoutStopping: launch's and run's checkpoint
// signal asks for a checkpoint each time it comes and says at which step;
// training goes on.
func TestAskOnSignalsAsksWithoutStopping(t *testing.T) {
	fake := fakeAsks{askStatus: running(10, &api.CheckpointAsked{Step: 40, Tries: 1}, nil)}
	c := newCoordClient(fake.serve(t))
	defer c.close()
	sigs := make(chan os.Signal)
	var notices syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	wait := c.askOnSignals(ctx, "j1", sigs, &notices)
	sigs <- syscall.SIGUSR2
	sigs <- syscall.SIGUSR1
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(notices.String(), "asked for at step 40; training goes on") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wait()
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.asks != 2 || !strings.Contains(notices.String(), "user defined signal 2: checkpoint of job j1 asked for at step 40") {
		t.Fatalf("%d asks, notices %q; want one per signal", fake.asks, notices.String())
	}
}
