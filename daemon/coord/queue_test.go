package coord

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// TestManyConcurrentSubmitsAllFinishInOrder: 50 jobs submitted at once to
// a cluster that runs one at a time all wait their turn and finish, each
// starting after the one submitted before it.
func TestManyConcurrentSubmitsAllFinishInOrder(t *testing.T) {
	// 50 submissions at once under the race detector can hold up a fake
	// node's heartbeat past the usual timeout on a loaded machine; this
	// test is about the queue, not liveness.
	tc := startCluster(t, func(c *Config) { c.HeartbeatTimeout = 10 * timeout })
	tc.start(newFakeNode("only-cpu-a", "cpu", 2, 7401))
	tc.start(newFakeNode("only-cpu-b", "cpu", 2, 7402))
	job := strings.Replace(ctrJob, "steps = 12", "steps = 3", 1) + "method = \"cpu\"\n"
	ids := make([]string, 50)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			status, body := tc.do("POST", "/v1/jobs", api.ContentTypeTOML, []byte(job))
			if status != http.StatusCreated {
				t.Errorf("submit %d: %d %s", i, status, body)
			}
		})
	}
	wg.Wait()
	var jobs []api.JobStatus
	deadline := time.Now().Add(4 * patience)
	for {
		tc.call("GET", "/v1/jobs", nil, http.StatusOK, &jobs)
		if !slices.ContainsFunc(jobs, func(s api.JobStatus) bool { return !s.State.Final() }) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(jobs) != len(ids) {
		t.Fatalf("%d jobs listed, want %d", len(jobs), len(ids))
	}
	for i, s := range jobs {
		if s.State != api.JobDone {
			t.Fatalf("job %s: %s %q", s.ID, s.State, s.Reason)
		}
		if i > 0 && s.Started.Before(*jobs[i-1].Started) {
			t.Errorf("job %s started at %s, before job %s (%s) submitted ahead of it", s.ID, s.Started, jobs[i-1].ID, jobs[i-1].Started)
		}
	}
}

// TestHostilePathsAreRefusedAtOnce: a model or data path that is a device
// or a FIFO is refused at submission, quickly, naming the field.
func TestHostilePathsAreRefusedAtOnce(t *testing.T) {
	tc := startCluster(t, nil)
	fifo := makeFIFO(t)
	for _, tt := range []struct{ old, new, field string }{
		{`model = "ctrdnn"`, `model = "/dev/zero"`, "model"},
		{`model = "ctrdnn"`, fmt.Sprintf("model = %q", fifo), "model"},
		{`data = "synthetic:1"`, `data = "criteo:/dev/zero"`, "data"},
	} {
		start := time.Now()
		status, body := tc.do("POST", "/v1/jobs", api.ContentTypeTOML, []byte(strings.Replace(ctrJob, tt.old, tt.new, 1)))
		if status != http.StatusBadRequest || !strings.Contains(string(body), tt.field) {
			t.Errorf("%s: %d %s, want 400 naming %s", tt.new, status, body, tt.field)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: answered after %s", tt.new, d)
		}
	}
}

// TestFinishedJobsArePruned: beyond KeepFinished, the oldest final jobs
// are forgotten, except one a running job's restart chain names.
func TestFinishedJobsArePruned(t *testing.T) {
	c := &Coordinator{cfg: Config{KeepFinished: 2}.withDefaults(), idem: map[string]string{}}
	c.log = c.cfg.Logger
	for i := range 5 {
		c.jobs = append(c.jobs, &job{id: fmt.Sprintf("j%d", i+1), state: api.JobDone})
	}
	c.jobs[0].state = api.JobFailed
	c.jobs = append(c.jobs, &job{id: "j6", state: api.JobRunning, restartOf: "j1"})
	c.prune(time.Now())
	var kept []string
	for _, j := range c.jobs {
		kept = append(kept, j.id)
	}
	if want := []string{"j1", "j4", "j5", "j6"}; !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v (j1 is j6's restart chain)", kept, want)
	}
}
