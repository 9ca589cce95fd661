package coord

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/api"
)

// startQuietCluster is a cluster whose nodes stay alive between the
// test's own heartbeats.
func startQuietCluster(t *testing.T) *testCluster {
	return startCluster(t, func(c *Config) { c.HeartbeatTimeout = patience })
}

func (tc *testCluster) registerNode(req api.RegisterRequest) string {
	tc.t.Helper()
	var r api.RegisterResponse
	tc.call("POST", "/v1/nodes/register", req, http.StatusOK, &r)
	return r.NodeID
}

func (tc *testCluster) heartbeat(id string, hb api.Heartbeat) api.HeartbeatResponse {
	tc.t.Helper()
	var r api.HeartbeatResponse
	tc.call("POST", "/v1/nodes/"+id+"/heartbeat", hb, http.StatusOK, &r)
	return r
}

func (tc *testCluster) nodeStatus(id string) api.NodeStatus {
	tc.t.Helper()
	var nodes []api.NodeStatus
	tc.call("GET", "/v1/nodes", nil, http.StatusOK, &nodes)
	for _, n := range nodes {
		if n.ID == id {
			return n
		}
	}
	tc.t.Fatalf("no node %s in %+v", id, nodes)
	return api.NodeStatus{}
}

// TestThrottleReachesTheNode throttles a live node: the share is handed to
// it in heartbeat replies until it reports applying it, which its status
// then shows.
func TestThrottleReachesTheNode(t *testing.T) {
	tc := startQuietCluster(t)
	req := newFakeNode("slow", "cpu", 1, 7001).req
	req.CPUShare, req.CPUShareMode = 1, api.CPUShareNone
	id := tc.registerNode(req)
	if s := tc.nodeStatus(id); s.CPUShare != 1 || s.CPUShareMode != api.CPUShareNone || s.CPUShareRequested != 0 {
		t.Fatalf("registered: share %g mode %q requested %g, want 1, none, 0", s.CPUShare, s.CPUShareMode, s.CPUShareRequested)
	}
	if r := tc.heartbeat(id, api.Heartbeat{CPUShare: 1, CPUShareMode: api.CPUShareNone}); r.CPUShare != 0 {
		t.Fatalf("an unthrottled node is handed share %g", r.CPUShare)
	}

	var s api.NodeStatus
	tc.call("POST", "/v1/nodes/"+id+"/throttle", api.ThrottleRequest{CPUShare: 0.25}, http.StatusOK, &s)
	if s.ID != id || s.CPUShare != 1 || s.CPUShareRequested != 0.25 {
		t.Fatalf("throttle reply: %+v, want share 1 (not applied yet), requested 0.25", s)
	}
	for range 2 { // handed again until the node reports it: a reply can be lost
		if r := tc.heartbeat(id, api.Heartbeat{CPUShare: 1, CPUShareMode: api.CPUShareNone}); r.CPUShare != 0.25 {
			t.Fatalf("heartbeat reply hands share %g, want 0.25", r.CPUShare)
		}
	}
	if r := tc.heartbeat(id, api.Heartbeat{CPUShare: 0.25, CPUShareMode: api.CPUShareDutyCycle}); r.CPUShare != 0 {
		t.Fatalf("the node applies 0.25 and is handed %g", r.CPUShare)
	}
	if s := tc.nodeStatus(id); s.CPUShare != 0.25 || s.CPUShareMode != api.CPUShareDutyCycle || s.CPUShareRequested != 0.25 {
		t.Fatalf("after applying: share %g mode %q requested %g", s.CPUShare, s.CPUShareMode, s.CPUShareRequested)
	}

	tc.call("POST", "/v1/nodes/slow/throttle", api.ThrottleRequest{CPUShare: 1}, http.StatusOK, &s) // by name
	if r := tc.heartbeat(id, api.Heartbeat{CPUShare: 0.25, CPUShareMode: api.CPUShareDutyCycle}); r.CPUShare != 1 {
		t.Fatalf("throttled back to 1 by name: handed %g", r.CPUShare)
	}
}

func TestThrottleRefusesBadRequests(t *testing.T) {
	tc := startQuietCluster(t)
	id := tc.registerNode(newFakeNode("n", "cpu", 1, 7001).req)
	for _, body := range []string{`{"cpu_share": 0}`, `{"cpu_share": -0.5}`, `{"cpu_share": 1.5}`, `{"cpu_share": 0.001}`,
		`{"cpu_share": "half"}`, `{}`, `{"cpu_share": 0.5, "extra": 1}`, `not json`} {
		status, b := tc.do("POST", "/v1/nodes/"+id+"/throttle", api.ContentTypeJSON, []byte(body))
		if status != http.StatusBadRequest {
			t.Errorf("throttle with %s: %d %s, want 400", body, status, b)
		}
	}
	if s := tc.nodeStatus(id); s.CPUShareRequested != 0 {
		t.Errorf("a refused throttle was recorded: requested %g", s.CPUShareRequested)
	}
	status, b := tc.do("POST", "/v1/nodes/n99/throttle", api.ContentTypeJSON, []byte(`{"cpu_share": 0.5}`))
	if status != http.StatusNotFound || !strings.Contains(string(b), "n99") {
		t.Errorf("throttling an unknown node: %d %s, want 404 naming it", status, b)
	}
	tc.heartbeat(id, api.Heartbeat{Leaving: true})
	status, b = tc.do("POST", "/v1/nodes/"+id+"/throttle", api.ContentTypeJSON, []byte(`{"cpu_share": 0.5}`))
	if status != http.StatusConflict {
		t.Errorf("throttling a dead node: %d %s, want 409", status, b)
	}
}

// TestThrottleOutlivesARestartOfTheDaemon: a daemon that registers again
// under a throttled name is handed the share too.
func TestThrottleOutlivesARestartOfTheDaemon(t *testing.T) {
	tc := startQuietCluster(t)
	req := newFakeNode("n", "cpu", 1, 7001).req
	first := tc.registerNode(req)
	tc.call("POST", "/v1/nodes/"+first+"/throttle", api.ThrottleRequest{CPUShare: 0.5}, http.StatusOK, nil)
	second := tc.registerNode(req)
	if second == first {
		t.Fatalf("registered again as %s", second)
	}
	if r := tc.heartbeat(second, api.Heartbeat{CPUShare: 1}); r.CPUShare != 0.5 {
		t.Fatalf("the restarted daemon is handed share %g, want 0.5", r.CPUShare)
	}
}

// TestThrottleOutlivesTheCoordinator: the share a throttle asked for is
// stored by node name before the reply, so a coordinator killed before the
// node's next heartbeat hands it on once the node registers again with its
// successor, and shows it asked for.
func TestThrottleOutlivesTheCoordinator(t *testing.T) {
	cfg := Config{Catalog: loadTestCatalog(t), StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	c, stop := runCoordinator(t, cfg)
	addLiveNode(c, "n1", "slow")
	if s, err := c.throttle(context.Background(), "slow", api.ThrottleRequest{CPUShare: 0.4}); err != nil || s.CPUShareRequested != 0.4 {
		t.Fatalf("throttle: %+v, %v", s, err)
	}
	stop()

	c, stop = runCoordinator(t, cfg)
	defer stop()
	again := addLiveNode(c, "n2", "slow")
	if r := c.exchangeShare(again.id, api.Heartbeat{CPUShare: 1, CPUShareMode: api.CPUShareNone}); r != 0.4 {
		t.Errorf("after the coordinator's restart the node is handed share %g, want 0.4", r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.withShare(c.nodeStatusOf(again), again); s.CPUShareRequested != 0.4 {
		t.Errorf("status after the restart: requested %g, want 0.4", s.CPUShareRequested)
	}
}
