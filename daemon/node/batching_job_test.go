package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/syncbuf"
)

// startNodeAt runs a node daemon offering one unit of typ at CPU share
// share until the test ends.
func (cl *cluster) startNodeAt(name, typ string, share float64) {
	cl.startNodeLogging(name, typ, share, quiet)
}

// startNodeLogging is startNodeAt with the node's log to log.
func (cl *cluster) startNodeLogging(name, typ string, share float64, log *slog.Logger) {
	cl.t.Helper()
	a, err := New(Config{Name: name, Coordinator: cl.base, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0", Type: typ,
		Units: 1, Plain: true, CPUShare: share, ReadyTimeout: 30 * time.Second, StepTimeout: 30 * time.Second, Logger: log})
	if err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(cl.ctx)
	done := make(chan struct{})
	cl.wg.Go(func() { defer close(done); a.Run(ctx) })
	cl.t.Cleanup(func() { cancel(); <-done })
}

// writeJob writes a job file made from the data-parallel job (steps
// steps, batch batch) with the replacements and extra sections.
func writeJob(t *testing.T, steps, batch int, replace map[string]string, extra string) string {
	t.Helper()
	job := strings.Replace(dpJobSource(t, steps), "batch = 64", fmt.Sprintf("batch = %d", batch), 1)
	for old, repl := range replace {
		if !strings.Contains(job, old) {
			t.Fatalf("the job file has no %q", old)
		}
		job = strings.Replace(job, old, repl, 1)
	}
	return writeJobFile(t, job+extra)
}

// splitOf returns the batches of stage st's replicas on the nodes named.
func splitOf(t *testing.T, st api.StageStatus, names ...string) []int {
	t.Helper()
	out := make([]int, len(names))
	for i, n := range names {
		k := slices.Index(st.Nodes, n)
		if k < 0 {
			t.Fatalf("stage %d runs on %v, not on %s", st.Stage, st.Nodes, n)
		}
		out[i] = st.Batches[k]
	}
	return out
}

// TestDynamicBatchingInASP: an ASP job of two replicas, one on a node at a
// quarter of its CPU, has its batch moved to the fast replica while it
// runs (each replica takes a new split from its own next step, the
// replicas' step counts differing). It asserts the split, not any time.
func TestDynamicBatchingInASP(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNodeAt("fast", "cpu", 1)
	cl.startNodeAt("slow", "cpu", 0.25)
	cl.waitNodes(2)
	id := cl.submit(writeJob(t, 100000, 1024, map[string]string{`mode = "bsp"`: `mode = "asp"`}, "[batching]\ninterval = 2\n"))
	s := cl.waitJob(id, func(s api.JobStatus) bool {
		return s.State.Final() || (s.Batching != nil && s.Batching.Adjustments >= 2)
	})
	if s.State != api.JobRunning || s.Batching == nil || s.Batching.Mode != "dynamic" || s.Batching.Adjustments < 2 {
		t.Fatalf("job %s (%q), batching %+v", s.State, s.Reason, s.Batching)
	}
	split := splitOf(t, s.Stages[0], "fast", "slow")
	if split[0]+split[1] != 1024 || split[0] <= split[1] {
		t.Errorf("after %d adjustments: fast %d, slow %d (step seconds %v); want the fast replica to carry more of 1024",
			s.Batching.Adjustments, split[0], split[1], s.Stages[0].StepSeconds)
	}
	cl.send("DELETE", "/v1/jobs/"+id, "", nil)
}

// TestDynamicBatchingBalancesLanes: a pipeline of two stages of two
// replicas each (four nodes at full CPU) runs as two lanes; once lane 1's
// nodes are throttled to a quarter of their CPU, the controller moves
// batch to lane 0, and both stages' replicas of a lane carry the lane's
// batch.
func TestDynamicBatchingBalancesLanes(t *testing.T) {
	cl := startClusterOn(t, "testdata/lanes-catalog.toml", "")
	var logs syncbuf.Buffer
	for _, n := range []struct{ name, typ string }{{"c0", "cpu"}, {"c1", "cpu"}, {"g0", "gpu"}, {"g1", "gpu"}} {
		cl.startNodeLogging(n.name, n.typ, 1, slog.New(slog.NewJSONHandler(&logs, nil)))
	}
	cl.waitNodes(4)
	job := writeJob(t, 100000, 512, map[string]string{
		"throughput_limit = 1000000": "throughput_limit = 700000", `method = "cpu"`: `method = "heuristic"`},
		"[batching]\nmode = \"dynamic\"\ninterval = 2\n")
	id := cl.submit(job)
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.State.Final() || s.Step >= 2 })
	if s.State != api.JobRunning || len(s.Stages) != 2 || len(s.Stages[0].Nodes) != 2 || len(s.Stages[1].Nodes) != 2 {
		t.Fatalf("job %s (%q) on stages %+v; want two stages of two replicas", s.State, s.Reason, s.Stages)
	}
	if s.Batching == nil || s.Batching.Lanes != 2 {
		t.Fatalf("batching %+v, want two lanes", s.Batching)
	}
	fast := []string{s.Stages[0].Nodes[0], s.Stages[1].Nodes[0]}
	slow := []string{s.Stages[0].Nodes[1], s.Stages[1].Nodes[1]}
	for _, n := range slow {
		cl.do("POST", "/v1/nodes/"+n+"/throttle", api.ContentTypeJSON, []byte(`{"cpu_share": 0.25}`), &api.NodeStatus{})
	}
	s = cl.waitJob(id, func(s api.JobStatus) bool {
		if s.State.Final() || s.Batching == nil || s.Batching.Adjustments < 2 || len(s.Stages) != 2 {
			return s.State.Final()
		}
		return s.Stages[0].Batches[0] > s.Stages[0].Batches[1]
	})
	if s.State != api.JobRunning || s.Batching == nil {
		t.Fatalf("job %s (%q), batching %+v", s.State, s.Reason, s.Batching)
	}
	for i, st := range s.Stages {
		split := []int{splitOf(t, st, fast[i])[0], splitOf(t, st, slow[i])[0]}
		if split[0]+split[1] != 512 || split[0] <= split[1] {
			t.Errorf("stage %d after %d adjustments: fast lane %d, slow lane %d (step seconds %v); want the fast lane to carry more of 512",
				i, s.Batching.Adjustments, split[0], split[1], st.StepSeconds)
		}
	}
	if !slices.Equal(s.Stages[0].Batches, s.Stages[1].Batches) {
		t.Errorf("stage batches %v and %v: a lane's replicas must carry the same batch", s.Stages[0].Batches, s.Stages[1].Batches)
	}
	cl.send("DELETE", "/v1/jobs/"+id, "", nil)
	checkResizesAtOneStep(t, logs.String(), 4)
}

// checkResizesAtOneStep: in the nodes' JSON log, the replicas took each
// change of a job's batches ("stage resized" lines of one generation) at
// one step, so that stage 0's replicas shard one data segment, and all
// replicas took at least one (the job's last change may not have reached
// every node before it was cancelled).
func checkResizesAtOneStep(t *testing.T, log string, replicas int) {
	t.Helper()
	byGen := map[int64][]int64{} // generation: the steps it was taken from
	for line := range strings.Lines(log) {
		var rec struct {
			Msg        string `json:"msg"`
			Generation int64  `json:"generation"`
			From       int64  `json:"from"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("node log line %q: %v", line, err)
		}
		if rec.Msg != "stage resized" {
			continue
		}
		byGen[rec.Generation] = append(byGen[rec.Generation], rec.From)
	}
	everyReplica := 0
	for gen, from := range byGen {
		if slices.Min(from) != slices.Max(from) {
			t.Errorf("generation %d taken from steps %v; want every replica at one step", gen, from)
		}
		if len(from) == replicas {
			everyReplica++
		}
	}
	if everyReplica == 0 {
		t.Errorf("resizes taken %v (generation: from steps): none by all %d replicas", byGen, replicas)
	}
}

// TestDynamicBatchingByRestart: with batching.resize = "restart", a BSP
// job of two replicas, one on a node at a quarter of its CPU, resizes its
// batches by stopping and restarting from its newest checkpoint: the job
// ends, saying so and naming its successor, and the successor runs from
// that checkpoint with the restart counted and the fast replica carrying
// more of the batch.
func TestDynamicBatchingByRestart(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNodeAt("fast", "cpu", 1)
	cl.startNodeAt("slow", "cpu", 0.25)
	cl.waitNodes(2)
	dir := t.TempDir()
	id := cl.submit(writeJob(t, 100000, 1024, nil, fmt.Sprintf(
		"[checkpoint]\ndir = %q\nevery = 2\n[batching]\nmode = \"dynamic\"\nresize = \"restart\"\ninterval = 2\n", dir)))
	first := cl.waitJob(id, func(s api.JobStatus) bool { return s.State.Final() })
	if first.RestartedAs == "" || !strings.Contains(first.Reason, "restarting to resize its batches") {
		t.Fatalf("job %s ended %s (%q), restarted as %q; want a restart for its batches", id, first.State, first.Reason, first.RestartedAs)
	}
	s := cl.waitJob(first.RestartedAs, func(s api.JobStatus) bool {
		return s.State.Final() || (s.State == api.JobRunning && len(s.Stages) == 1 && len(s.Stages[0].Batches) == 2)
	})
	if s.State != api.JobRunning || s.RestartOf != id || s.RestoredFrom == nil || s.Batching == nil || s.Batching.Restarts < 1 {
		t.Fatalf("successor %s: %s (%q), restart of %q, restored from %+v, batching %+v; want it running from a checkpoint of %s",
			s.ID, s.State, s.Reason, s.RestartOf, s.RestoredFrom, s.Batching, id)
	}
	split := splitOf(t, s.Stages[0], "fast", "slow")
	if split[0]+split[1] != 1024 || split[0] <= split[1] {
		t.Errorf("after %d restart(s): fast %d, slow %d; want the fast replica to carry more of 1024", s.Batching.Restarts, split[0], split[1])
	}
	cl.send("DELETE", "/v1/jobs/"+s.ID, "", nil)
}
