package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/syncbuf"
)

// longDPJob is the data-parallel job with steps steps and one PS shard.
func longDPJob(t *testing.T, steps int) string {
	t.Helper()
	return writeJobFile(t, dpJobSource(t, steps))
}

// TestDeadReplicaLeavesTheStage: when the node of a stage replica that
// holds no PS shard dies, the job goes on with the other replica, which
// takes the whole batch, and trains to its last step without a restart.
func TestDeadReplicaLeavesTheStage(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	stops := map[string]func(){"a": cl.startNode("a", "cpu"), "b": cl.startNode("b", "cpu")}
	cl.waitNodes(2)
	id := cl.submit(longDPJob(t, 400))
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 5 || s.State.Final() })
	if s.State != api.JobRunning || len(s.Stages[0].Nodes) != 2 || len(s.PS) != 1 {
		t.Fatalf("before the kill: %s (%s), stages %+v, ps %v", s.State, s.Reason, s.Stages, s.PS)
	}
	victim := s.Stages[0].Nodes[0]
	if victim == s.PS[0] {
		victim = s.Stages[0].Nodes[1]
	}
	stops[victim]()

	s = cl.waitJob(id, final)
	if s.State != api.JobDone || s.Step != 400 || s.Restarts != 0 || s.RestartedAs != "" {
		t.Fatalf("after the kill: %s (%q) at step %d, restarted as %q", s.State, s.Reason, s.Step, s.RestartedAs)
	}
	if st := s.Stages[0]; slices.Contains(st.Nodes, victim) || len(st.Nodes) != 1 || st.Batches[0] != 64 || s.Generation != 2 {
		t.Errorf("the stage ended on %v with batches %v, generation %d; want one node without %s, batch 64, generation 2",
			st.Nodes, st.Batches, s.Generation, victim)
	}
}

// TestPatchResizesAStage: PATCH /v1/jobs/{id} drops a replica and gives
// the other the whole batch; the dropped replica's node is freed and the
// job trains to its end. Bad resizes are refused.
func TestPatchResizesAStage(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)
	id := cl.submit(longDPJob(t, 300))
	cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 3 || s.State.Final() })
	patch := func(req api.ResizeRequest) (int, string) {
		body, _ := json.Marshal(req)
		return cl.send("PATCH", "/v1/jobs/"+id, api.ContentTypeJSON, body)
	}
	for _, bad := range []api.ResizeRequest{
		{Replicas: []int{0, 5}, Batches: []int{32, 32}},
		{Replicas: []int{1, 0}, Batches: []int{32, 32}},
		{Replicas: []int{0}, Batches: []int{0}},
		{Stage: 1, Replicas: []int{0}, Batches: []int{64}},
	} {
		if status, text := patch(bad); status != http.StatusBadRequest {
			t.Errorf("resize %+v: %d %s, want 400", bad, status, text)
		}
	}
	status, text := patch(api.ResizeRequest{Replicas: []int{1}, Batches: []int{64}})
	if status != http.StatusOK {
		t.Fatalf("resize: %d %s", status, text)
	}
	var s api.JobStatus
	if err := json.NewDecoder(bytes.NewReader([]byte(text))).Decode(&s); err != nil || len(s.Stages[0].Nodes) != 1 || s.Stages[0].Batches[0] != 64 {
		t.Fatalf("resize answered %s (%v)", text, err)
	}
	s = cl.waitJob(id, final)
	if s.State != api.JobDone || s.Step != 300 || s.Generation != 2 {
		t.Fatalf("after the resize: %s (%q) at step %d, generation %d", s.State, s.Reason, s.Step, s.Generation)
	}
	if status, _ := patch(api.ResizeRequest{Replicas: []int{1}, Batches: []int{64}}); status != http.StatusConflict {
		t.Errorf("resizing a finished job: %d, want 409", status)
	}
}

// TestBadDataIsNotRestarted: a job with restarts whose data file has a
// malformed line in the middle fails when stage 0 reaches it, naming the
// file and line, without a restart: running it again would fail again.
func TestBadDataIsNotRestarted(t *testing.T) {
	src, err := os.ReadFile("../data/testdata/criteo_sample.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	lines[150] = "1,this is not a criteo line"
	dataPath := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(dataPath, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)
	job, err := os.ReadFile(longDPJob(t, 400))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(job), `data = "synthetic:1"`, fmt.Sprintf("data = %q", "criteo:"+dataPath), 1) +
		fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 1000\nrestarts = 3\n", t.TempDir())
	path := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s := cl.waitJob(cl.submit(path), final)
	if s.State != api.JobFailed || s.RestartedAs != "" || !strings.Contains(s.Reason, "bad.csv:151") ||
		!strings.Contains(s.Reason, "not restarted") {
		t.Fatalf("job %s (%q), restarted as %q; want failed at bad.csv:151 without a restart", s.State, s.Reason, s.RestartedAs)
	}
}

// TestDynamicBatchingFollowsTheSlowerReplica: of two replicas, one on a
// node at a quarter of its CPU, the dynamic controller (auto mode: the
// replicas' shares differ) moves batch from the slow one to the fast one
// while the job runs, both replicas taking each change at one step. It
// asserts the split, not any time.
func TestDynamicBatchingFollowsTheSlowerReplica(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	var logs syncbuf.Buffer
	for name, share := range map[string]float64{"fast": 1, "slow": 0.25} {
		cl.startNodeLogging(name, "cpu", share, slog.New(slog.NewJSONHandler(&logs, nil)))
	}
	cl.waitNodes(2)
	src, err := os.ReadFile(longDPJob(t, 100000))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "job.toml")
	job := strings.Replace(string(src), "batch = 64", "batch = 1024", 1) + "[batching]\ninterval = 2\n"
	if err := os.WriteFile(path, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	id := cl.submit(path)
	s := cl.waitJob(id, func(s api.JobStatus) bool {
		return s.State.Final() || (s.Batching != nil && s.Batching.Adjustments >= 2)
	})
	if s.State != api.JobRunning || s.Batching == nil || s.Batching.Mode != "dynamic" {
		t.Fatalf("job %s (%q), batching %+v", s.State, s.Reason, s.Batching)
	}
	st := s.Stages[0]
	fast, slow := st.Batches[slices.Index(st.Nodes, "fast")], st.Batches[slices.Index(st.Nodes, "slow")]
	if fast+slow != 1024 || fast <= slow {
		t.Errorf("after %d adjustments: fast %d, slow %d (step seconds %v); want the fast replica to carry more of 1024",
			s.Batching.Adjustments, fast, slow, st.StepSeconds)
	}
	cl.send("DELETE", "/v1/jobs/"+id, "", nil)
	checkResizesAtOneStep(t, logs.String(), 2)
}

// TestPatchGrowsAStage: PATCH /v1/jobs/{id} with add puts a third replica
// on a node that joined after the job started, without a restart. The
// parameter servers wait for it from the step it joins at, so the stage
// can pass that step only if it trains; the job is then cancelled.
func TestPatchGrowsAStage(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)
	id := cl.submit(longDPJob(t, 1_000_000))
	cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 3 || s.State.Final() })
	cl.startNode("c", "cpu")
	cl.waitNodes(3)
	grow, _ := json.Marshal(api.ResizeRequest{Replicas: []int{0, 1}, Batches: []int{24, 20}, Add: []api.NewReplica{{Node: "c", Batch: 20}}})
	var status int
	var text string
	for range 100 { // until every replica has reported its data position
		if status, text = cl.send("PATCH", "/v1/jobs/"+id, api.ContentTypeJSON, grow); status != http.StatusConflict || !strings.Contains(text, "try again") {
			break
		}
		time.Sleep(interval)
	}
	var grown api.JobStatus
	if status != http.StatusOK || json.Unmarshal([]byte(text), &grown) != nil || grown.JoiningAt == 0 {
		t.Fatalf("grow: %d %s", status, text)
	}
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Step > grown.JoiningAt || s.State.Final() })
	if s.State != api.JobRunning || s.Restarts != 0 || s.RestartedAs != "" || s.Generation != 2 || s.JoiningAt != 0 {
		t.Fatalf("after the grow: %s (%q) at step %d (joins at %d), generation %d, restarted as %q",
			s.State, s.Reason, s.Step, grown.JoiningAt, s.Generation, s.RestartedAs)
	}
	st := s.Stages[0]
	if at := slices.Index(st.Nodes, "c"); at < 0 || !slices.Equal(st.Replicas, []int{0, 1, 2}) || !slices.Equal(st.Batches, []int{24, 20, 20}) {
		t.Errorf("the stage runs on %v (replicas %v) with batches %v; want c's replica 2 with 20", st.Nodes, st.Replicas, st.Batches)
	}
	cancelAndWait(t, cl, id)
}

// cancelAndWait cancels job id and waits for it to end.
func cancelAndWait(t *testing.T, cl *cluster, id string) {
	t.Helper()
	if status, text := cl.send("DELETE", "/v1/jobs/"+id, "", nil); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, text)
	}
	cl.waitJob(id, final)
}

// TestAShrunkStageGrowsBackUpInPlace: a stage that lost a replica runs
// below its throughput_limit; once a node joins, it grows back up onto it
// without a restart (no steps trained again, the same job), says it no
// longer runs below its limit, and trains there; the job is then
// cancelled. With checkpoints and without: the grow does not wait for one.
func TestAShrunkStageGrowsBackUpInPlace(t *testing.T) {
	t.Run("checkpoints", func(t *testing.T) {
		ckptDir := t.TempDir() // before the cluster: removed after its nodes stop writing
		shrinkThenGrowBack(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 100\n", ckptDir))
	})
	t.Run("none", func(t *testing.T) { shrinkThenGrowBack(t, "") })
}

func shrinkThenGrowBack(t *testing.T, extra string) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	stops := map[string]func(){"a": cl.startNode("a", "cpu"), "b": cl.startNode("b", "cpu")}
	cl.waitNodes(2)
	id := cl.submit(writeJobFile(t, dpJobSource(t, 1_000_000)+extra))
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 5 || s.State.Final() })
	victim := s.Stages[0].Nodes[0]
	if victim == s.PS[0] {
		victim = s.Stages[0].Nodes[1]
	}
	stops[victim]()
	s = cl.waitJob(id, func(s api.JobStatus) bool { return strings.HasPrefix(s.Reason, "shrunk below") || s.State.Final() })
	if s.State != api.JobRunning {
		t.Fatalf("after the kill: %s (%q) at step %d", s.State, s.Reason, s.Step)
	}
	cl.startNode("c", "cpu")
	s = cl.waitJob(id, func(s api.JobStatus) bool { return s.TrainedOn("c") || s.State.Final() })
	if s.State != api.JobRunning || s.RestartedAs != "" || s.Reason != "" || len(s.Stages[0].Nodes) != 2 {
		t.Fatalf("after c joined: %s (%q) at step %d on %v, restarted as %q; want running on c and the PS's node, its reason cleared",
			s.State, s.Reason, s.Step, s.Stages[0].Nodes, s.RestartedAs)
	}
	cancelAndWait(t, cl, id)
}
