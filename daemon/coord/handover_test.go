package coord

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
)

// handoverJob is one CPU stage and its parameter-server shard.
const handoverJob = ctrJob + "method = \"cpu\"\nthroughput_limit = 1\n"

// TestARestartedCoordinatorHandsOverATaskItsNodeNeverGot: the coordinator
// placed a job and went down before the PS node's heartbeat fetched its
// task. That daemon, registering again with the id it held (it stopped no
// task since), is handed the task and the job goes on; a daemon that
// names no previous id (it restarted) fails the job, as a lost task does.
func TestARestartedCoordinatorHandsOverATaskItsNodeNeverGot(t *testing.T) {
	for _, vouches := range []bool{true, false} {
		cfg := Config{Catalog: loadTestCatalog(t), StateDir: t.TempDir(), HeartbeatInterval: interval,
			HeartbeatTimeout: patience, AdoptionTimeout: patience, Logger: slog.New(slog.DiscardHandler)}
		c, stop, reqs, ids, st := placeHandoverJob(t, cfg, 9201)
		id := st.ID
		late := st.PS[0]
		held := heartbeatAll(t, c, ids, late) // what the nodes that heartbeated run
		stop()

		c, stop = runCoordinator(t, cfg)
		for _, r := range reqs {
			r.Tasks, r.Previous = held[r.Name], ids[r.Name]
			if r.Name == late && !vouches {
				r.Previous = ""
			}
			ids[r.Name] = mustRegister(t, c, r)
		}
		serve(t, c, "GET", "/v1/jobs/"+id, "", nil, http.StatusOK, &st)
		if !vouches {
			if st.State == api.JobRunning || !strings.Contains(st.Reason, "registered again without task(s)") || !strings.Contains(st.Reason, id+".ps0") {
				t.Errorf("a restarted daemon without the PS task: the job is %s (%q), want it failed over", st.State, st.Reason)
			}
			stop()
			continue
		}
		if st.State != api.JobRunning {
			t.Fatalf("the job is %s (%q) after the node that never got its task registered again", st.State, st.Reason)
		}
		resp, err := c.heartbeat(ids[late], api.Heartbeat{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(resp.Tasks, func(task api.Task) bool { return task.TaskID == id+".ps0" }) {
			t.Errorf("node %s was handed %v, want its PS task %s.ps0", late, resp.Tasks, id)
		}
		stop()
		// The handed-over task is recorded bound to the new registration:
		// a third coordinator hands it over again to that id.
		c, stop = runCoordinator(t, cfg)
		r := reqs[slices.IndexFunc(reqs, func(r api.RegisterRequest) bool { return r.Name == late })]
		r.Tasks, r.Previous = held[late], ids[late]
		mustRegister(t, c, r)
		serve(t, c, "GET", "/v1/jobs/"+id, "", nil, http.StatusOK, &st)
		if st.State != api.JobRunning {
			t.Errorf("after a second restart the job is %s (%q)", st.State, st.Reason)
		}
		stop()
	}
}

// placeHandoverJob runs a coordinator of cfg with two one-unit nodes, a
// and b (on ports port and port+1), and places handoverJob on them; it
// returns the coordinator, its stop, the registrations, the node ids by
// name and the placed job's status.
func placeHandoverJob(t *testing.T, cfg Config, port int) (*Coordinator, func(), []api.RegisterRequest, map[string]string, api.JobStatus) {
	t.Helper()
	c, stop := runCoordinator(t, cfg)
	reqs := []api.RegisterRequest{newFakeNode("a", "cpu", 1, port).req, newFakeNode("b", "cpu", 1, port+1).req}
	ids := map[string]string{}
	for _, r := range reqs {
		ids[r.Name] = mustRegister(t, c, r)
	}
	var sub api.SubmitResponse
	serve(t, c, "POST", "/v1/jobs", api.ContentTypeTOML, []byte(handoverJob), http.StatusCreated, &sub)
	var st api.JobStatus
	waitFor(t, "the job placed", func() bool {
		serve(t, c, "GET", "/v1/jobs/"+sub.JobID, "", nil, http.StatusOK, &st)
		return st.State == api.JobRunning && len(st.PS) == 1
	})
	return c, stop, reqs, ids, st
}

// heartbeatAll heartbeats every node of ids but skip and returns the tasks
// each was handed, as the running reports of its next registration.
func heartbeatAll(t *testing.T, c *Coordinator, ids map[string]string, skip string) map[string][]api.TaskReport {
	t.Helper()
	held := map[string][]api.TaskReport{}
	for name, id := range ids {
		if name == skip {
			continue
		}
		resp, err := c.heartbeat(id, api.Heartbeat{})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range resp.Tasks {
			held[name] = append(held[name], api.TaskReport{TaskID: task.TaskID, State: api.TaskRunning})
		}
	}
	return held
}

func mustRegister(t *testing.T, c *Coordinator, r api.RegisterRequest) string {
	t.Helper()
	resp, err := c.register(r)
	if err != nil {
		t.Fatalf("register %s: %v", r.Name, err)
	}
	return resp.NodeID
}

// serve calls c's handler and decodes its answer into out.
func serve(t *testing.T, c *Coordinator, method, path, contentType string, body []byte, want int, out any) {
	t.Helper()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, req)
	if rec.Code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, rec.Code, rec.Body, want)
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// TestASkippedManifestIsReported: a complete step whose manifest the
// writer, behind, cannot take is reported in the job's status as a
// checkpoint not written.
func TestASkippedManifestIsReported(t *testing.T) {
	c := &Coordinator{cfg: Config{Catalog: loadTestCatalog(t)}.withDefaults(), manifests: make(chan manifestWork)} // no writer
	c.log = c.cfg.Logger
	jf, _ := jobAndModel(t, ctrJob+"[checkpoint]\ndir = \"/ck\"\nevery = 5\n")
	j := &job{id: "j1", file: jf, state: api.JobRunning}
	j.ckpt.files = map[int64]map[int]ckpt.FileEntry{5: {0: {Name: "shard-00000-of-00001.safetensors"}}}
	c.queueManifest(j, 5)
	s := c.status(j, time.Now())
	if s.CheckpointFailure == nil || s.CheckpointFailure.Step != 5 || !strings.Contains(s.CheckpointFailure.Error, "manifest skipped") || s.CheckpointFailures != 1 {
		t.Errorf("status: failure %+v, %d failures; want step 5's manifest reported skipped", s.CheckpointFailure, s.CheckpointFailures)
	}
}

// TestARunningJobWhoseNodeNeverReturnsFailsAtTheAdoptionTimeout: after a
// restart the coordinator takes a running job up from its state database
// and waits AdoptionTimeout for the job's nodes to register again:
// registering another node does not end the wait, and when the job's own
// node has not come by then the job fails, its reason naming the missing
// node and the timeout.
func TestARunningJobWhoseNodeNeverReturnsFailsAtTheAdoptionTimeout(t *testing.T) {
	const adoption = 300 * time.Millisecond
	cfg := Config{Catalog: loadTestCatalog(t), StateDir: t.TempDir(), HeartbeatInterval: interval,
		HeartbeatTimeout: patience, AdoptionTimeout: adoption, Logger: slog.New(slog.DiscardHandler)}
	c, stop, reqs, ids, st := placeHandoverJob(t, cfg, 9211)
	id := st.ID
	held := heartbeatAll(t, c, ids, "")
	var holder, other api.RegisterRequest // the node the job runs on, and the idle one
	for _, r := range reqs {
		if len(held[r.Name]) > 0 {
			holder = r
		} else {
			other = r
		}
	}
	if holder.Name == "" || other.Name == "" {
		t.Fatalf("tasks held %v: want the job on one of the two nodes", held)
	}
	stop()

	restarted := time.Now()
	c, stop = runCoordinator(t, cfg)
	defer stop()
	other.Previous = ids[other.Name]
	mustRegister(t, c, other)
	serve(t, c, "GET", "/v1/jobs/"+id, "", nil, http.StatusOK, &st)
	if st.State != api.JobRunning {
		t.Fatalf("right after the restart the job is %s (%q), want it running while %s may still come", st.State, st.Reason, holder.Name)
	}
	waitFor(t, "the job failed for its node", func() bool {
		serve(t, c, "GET", "/v1/jobs/"+id, "", nil, http.StatusOK, &st)
		return st.State != api.JobRunning
	})
	if waited := time.Since(restarted); waited < adoption {
		t.Errorf("the job failed %v after the restart, before the adoption timeout %v", waited, adoption)
	}
	if want := "node(s) " + holder.Name + " did not register again within 300ms"; st.State != api.JobFailed || !strings.Contains(st.Reason, want) {
		t.Errorf("the job is %s (%q), want failed with %q", st.State, st.Reason, want)
	}
}
