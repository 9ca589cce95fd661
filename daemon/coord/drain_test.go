package coord

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heterps/heterps/daemon/api"
)

// TestDrainingANodeTakesItOutOfService: draining the node of a stage
// replica of a job that syncs through the parameter servers drops that
// replica in place (the job goes on, below its limit, saying why), the
// node shows draining and then drained; draining the node of its
// parameter server and last replica leaves the job running there; when
// another node joins, the job moves back up onto it alone, and the second
// node is drained too; put back, a node shows in service.
func TestDrainingANodeTakesItOutOfService(t *testing.T) {
	tc, tr, src, _ := raiseFixture(t, 12)
	nodes := []*fakeNode{tr.node("a", "cpu", 2, 9141), tr.node("b", "cpu", 2, 9142)}
	for _, n := range nodes {
		tc.start(n)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := tc.c.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	id := tc.submit(src)
	waitFor(t, "the job running", func() bool { return tc.job(id).Step > 0 })
	victim := stageOnlyNode(t, nodes)
	draining := func() float64 {
		return one(t, reg, "heterps_node_draining", map[string]string{"node": victim.req.Name})
	}
	if d := draining(); d != 0 {
		t.Errorf("heterps_node_draining before the drain: %v", d)
	}

	var s api.NodeStatus
	tc.call("POST", "/v1/nodes/"+victim.req.Name+"/drain", api.DrainRequest{Drain: true}, http.StatusOK, &s)
	if !s.Draining || s.Name != victim.req.Name {
		t.Fatalf("drain answered %+v", s)
	}
	if d := draining(); d != 1 {
		t.Errorf("heterps_node_draining after the drain: %v", d)
	}
	if r := tc.job(id).Reason; !strings.HasPrefix(r, shrunkBelow) || !strings.Contains(r, "after node "+victim.req.Name+" is draining") {
		t.Fatalf("the job's reason after the drain: %q", r)
	}
	if st := tc.job(id).Stages[0]; st.Units != 2 || len(st.Nodes) != 1 || !strings.Contains(tc.job(id).Reason, fmt.Sprintf("predicted %.6g", st.PredictedThroughput)) {
		t.Errorf("the stage after the shrink: %d units, predicted %g samples/s, on %v; want the survivor's 2 units as the reason predicts them",
			st.Units, st.PredictedThroughput, st.Nodes)
	}
	waitFor(t, "the drained node's tasks stopped", func() bool {
		_, current, _ := victim.snapshot()
		return len(current) == 0 && len(tc.nodeNamed(victim.req.Name).Tasks) == 0
	})
	if st := tc.job(id); st.State != api.JobRunning || st.Restarts != 0 {
		t.Fatalf("the job after the drain: %s, %d restarts", st.State, st.Restarts)
	}
	psNode := nodes[0]
	if psNode == victim {
		psNode = nodes[1]
	}
	tc.call("POST", "/v1/nodes/"+psNode.req.Name+"/drain", api.DrainRequest{Drain: true}, http.StatusOK, &s)
	if st := tc.job(id); st.State != api.JobRunning || len(s.Tasks) == 0 || !s.Draining {
		t.Fatalf("draining the node of the job's parameter server and last replica: job %s, node %+v; want both going on", st.State, s)
	}

	tc.start(tr.node("c", "cpu", 8, 9143))
	chain := tc.chainOf(id)
	last := chain[len(chain)-1]
	if len(chain) != 2 || last.State != api.JobDone || last.Restarts != 0 {
		t.Fatalf("a chain of %d jobs ending %s with %d restarts, want the shrunk job and its move back up, done", len(chain), last.State, last.Restarts)
	}
	for _, n := range nodes {
		received, _, _ := n.snapshot()
		for taskID := range received {
			if strings.HasPrefix(taskID, last.ID+".") {
				t.Errorf("drained node %s got task %s of the moved job", n.req.Name, taskID)
			}
		}
	}
	if n := tc.nodeNamed(psNode.req.Name); !n.Draining || len(n.Tasks) != 0 {
		t.Errorf("the parameter server's node once the job moved: %+v, want drained", n)
	}

	s = api.NodeStatus{}
	tc.call("POST", "/v1/nodes/"+victim.id+"/drain", api.DrainRequest{Drain: false}, http.StatusOK, &s)
	if s.Draining || tc.nodeNamed(victim.req.Name).Draining {
		t.Errorf("put back, the node still shows draining: %+v", s)
	}
	if code, body := tc.do("POST", "/v1/nodes/nosuch/drain", api.ContentTypeJSON, []byte(`{"drain": true}`)); code != http.StatusNotFound {
		t.Errorf("draining an unknown node: %d %s", code, body)
	}
}

// stageOnlyNode is a node among nodes that hosts stage replicas and no
// parameter server: one a job can lose without a restart.
func stageOnlyNode(t *testing.T, nodes []*fakeNode) *fakeNode {
	t.Helper()
	for _, n := range nodes {
		_, current, _ := n.snapshot()
		ps := false
		for _, task := range current {
			ps = ps || task.Role == api.RolePS
		}
		if !ps && len(current) > 0 {
			return n
		}
	}
	t.Fatal("every node of the job hosts a parameter server: none can leave it without a restart")
	return nil
}

// nodeNamed is the status of the node last registered as name.
func (tc *testCluster) nodeNamed(name string) api.NodeStatus {
	tc.t.Helper()
	var nodes []api.NodeStatus
	tc.call("GET", "/v1/nodes", nil, http.StatusOK, &nodes)
	for i := len(nodes) - 1; i >= 0; i-- {
		if nodes[i].Name == name {
			return nodes[i]
		}
	}
	tc.t.Fatalf("no node %s", name)
	return api.NodeStatus{}
}

// TestADrainOutlivesTheCoordinator: the drain mark is kept by name in the
// state database: a coordinator that loads it places nothing on the node
// when it registers again, and shows it draining.
func TestADrainOutlivesTheCoordinator(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Catalog: loadTestCatalog(t), StateDir: dir, Logger: slog.New(slog.DiscardHandler)}
	c, stop := runCoordinator(t, cfg)
	addLiveNode(c, "n1", "a")
	if s, err := c.drain(context.Background(), "a", true); err != nil || !s.Draining {
		t.Fatalf("drain: %+v, %v", s, err)
	}
	stop()

	c, stop = runCoordinator(t, cfg)
	defer stop()
	again := addLiveNode(c, "n2", "a")
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.nodeStatusOf(again).Draining {
		t.Error("the node registered again after the restart is not draining")
	}
	if cl := c.cluster(&job{}, false); len(cl.live) != 0 {
		t.Errorf("placement sees %d live nodes, want none: the only one is draining", len(cl.live))
	}
}

// TestAJobQueuedBehindDrainedNodesSaysSo: a job that waits because the
// only node is draining says so in its reason, and starts once the node
// is put back.
func TestAJobQueuedBehindDrainedNodesSaysSo(t *testing.T) {
	tc := startCluster(t, nil)
	n := newFakeNode("only", "cpu", 4, 9161)
	tc.start(n)
	tc.call("POST", "/v1/nodes/only/drain", api.DrainRequest{Drain: true}, http.StatusOK, nil)
	id := tc.submit(ctrJob + "method = \"cpu\"\nthroughput_limit = 1\n")
	waitFor(t, "the job queued naming the drained node", func() bool {
		s := tc.job(id)
		return s.State == api.JobQueued && strings.HasSuffix(s.Reason, "; draining: only")
	})
	tc.call("POST", "/v1/nodes/only/drain", api.DrainRequest{Drain: false}, http.StatusOK, nil)
	if s := tc.waitJob(id); s.State != api.JobDone {
		t.Fatalf("the job once the node is back: %s %q", s.State, s.Reason)
	}
}

// TestAJobThatCannotShrinkMovesOffADrainingNode: a job whose stage syncs
// by allreduce cannot drop a replica in place; draining one of its nodes
// moves it at its next checkpoint onto the nodes that are not draining,
// as a move (no restart spent), and it ends there.
func TestAJobThatCannotShrinkMovesOffADrainingNode(t *testing.T) {
	tc, tr, src, _ := raiseFixture(t, 12)
	src = strings.Replace(src, "[checkpoint]", "dense_sync = \"allreduce\"\n[checkpoint]", 1)
	nodes := []*fakeNode{tr.node("a", "cpu", 2, 9171), tr.node("b", "cpu", 2, 9172)}
	for _, n := range nodes {
		tc.start(n)
	}
	id := tc.submit(src)
	waitFor(t, "the job running on both nodes", func() bool {
		s := tc.job(id)
		return s.Step > 0 && len(s.Stages) == 1 && len(s.Stages[0].Nodes) == 2
	})
	tc.call("POST", "/v1/nodes/b/drain", api.DrainRequest{Drain: true}, http.StatusOK, nil)
	chain := tc.chainOf(id)
	if len(chain) != 2 || !strings.HasPrefix(chain[0].Reason, "moving off draining node b from its newest checkpoint") {
		t.Fatalf("a chain of %d jobs, the first %q; want it moved off b", len(chain), chain[0].Reason)
	}
	last := chain[1]
	if last.State != api.JobDone || last.Step != last.Steps || last.Restarts != 0 {
		t.Fatalf("the moved job %s: %s %q at step %d of %d, %d restarts", last.ID, last.State, last.Reason, last.Step, last.Steps, last.Restarts)
	}
	received, _, _ := nodes[1].snapshot()
	for taskID := range received {
		if strings.HasPrefix(taskID, last.ID+".") {
			t.Errorf("the draining node got task %s of the moved job", taskID)
		}
	}
	if n := tc.nodeNamed("b"); len(n.Tasks) != 0 {
		t.Errorf("b after the move: %+v, want drained", n)
	}
}

// TestADrainWithNoRoomElsewhereLeavesTheJobRunning: draining the only node
// a job can run on takes it out of service for new work, but the job,
// which cannot shrink below one replica and has nowhere to move, keeps
// running there and ends done, with no restart and no move.
func TestADrainWithNoRoomElsewhereLeavesTheJobRunning(t *testing.T) {
	tc, tr, _, _ := raiseFixture(t, 12)
	src := strings.Replace(fmt.Sprintf(raiseJob, 1.0, t.TempDir()), "[checkpoint]", "dense_sync = \"allreduce\"\n[checkpoint]", 1)
	only := tr.node("a", "cpu", 2, 9191)
	tc.start(only)
	id := tc.submit(src)
	waitFor(t, "the job running on a", func() bool { return tc.job(id).Step > 0 })
	var s api.NodeStatus
	tc.call("POST", "/v1/nodes/a/drain", api.DrainRequest{Drain: true}, http.StatusOK, &s)
	if !s.Draining {
		t.Fatalf("drain answered %+v", s)
	}
	chain := tc.chainOf(id)
	if len(chain) != 1 {
		t.Fatalf("a chain of %d jobs (the first %s: %q); want the job left where it was", len(chain), chain[0].State, chain[0].Reason)
	}
	if last := chain[0]; last.State != api.JobDone || last.Step != last.Steps || last.Restarts != 0 {
		t.Errorf("the job on the drained node: %s %q at step %d of %d, %d restarts; want it done there", last.State, last.Reason, last.Step, last.Steps, last.Restarts)
	}
	if n := tc.nodeNamed("a"); !n.Draining {
		t.Errorf("a after the job: %+v, want still draining", n)
	}
}
