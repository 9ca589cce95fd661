package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/daemon/api"
)

// postJSON sends v to the coordinator at url+path and decodes the reply
// into out, failing the test unless it is 200.
func postJSON(t *testing.T, url, path string, v, out any) {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(url+path, api.ContentTypeJSON, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// TestNodesListsAndThrottles registers a node with an in-process
// coordinator, throttles it with `heterps nodes throttle`, and sees the
// share asked for in `heterps nodes` until the node's heartbeat reports
// applying it.
func TestNodesListsAndThrottles(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	url := startCoordinator(t)
	var reg api.RegisterResponse
	postJSON(t, url, "/v1/nodes/register", api.RegisterRequest{Name: "slow", DataAddr: "127.0.0.1:7001", Type: "cpu-1t", Units: 1,
		CPUShare: 1, CPUShareMode: api.CPUShareNone}, &reg)
	ctx := context.Background()
	nodes := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := runNodes(ctx, append(args, "--coordinator", url), &out, &errb); code != exitOK {
			t.Fatalf("nodes %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}

	if out := nodes(); !strings.Contains(out, reg.NodeID) || !strings.Contains(out, "slow") || !strings.Contains(out, "cpu-1t") {
		t.Fatalf("nodes:\n%s", out)
	}
	if out := nodes("throttle", "slow", "0.25"); !strings.Contains(out, "0.25 asked") {
		t.Fatalf("nodes throttle:\n%s", out)
	}
	if out := nodes(); !strings.Contains(out, "1 -> 0.25") {
		t.Fatalf("nodes after the throttle shows no pending share:\n%s", out)
	}
	var hb api.HeartbeatResponse
	postJSON(t, url, "/v1/nodes/"+reg.NodeID+"/heartbeat", api.Heartbeat{CPUShare: 1}, &hb)
	if hb.CPUShare != 0.25 {
		t.Fatalf("the heartbeat reply hands share %g, want 0.25", hb.CPUShare)
	}
	postJSON(t, url, "/v1/nodes/"+reg.NodeID+"/heartbeat", api.Heartbeat{CPUShare: 0.25, CPUShareMode: api.CPUShareDutyCycle}, &hb)
	var list []api.NodeStatus
	if err := json.Unmarshal([]byte(nodes("--json")), &list); err != nil || len(list) != 1 {
		t.Fatalf("nodes --json: %v, %+v", err, list)
	}
	if n := list[0]; n.CPUShare != 0.25 || n.CPUShareMode != api.CPUShareDutyCycle || n.CPUShareRequested != 0.25 || n.State != api.NodeAlive {
		t.Fatalf("nodes --json: %+v", n)
	}
}

func TestNodesThrottleRefusals(t *testing.T) {
	url := startCoordinator(t)
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"throttle", "n1"}, exitUsage, "want NODE and SHARE"},
		{[]string{"throttle", "n1", "half"}, exitUsage, "not a number"},
		{[]string{"throttle", "n1", "1.5"}, exitUsage, "0.01..1"},
		{[]string{"throttle", "n1", "0"}, exitUsage, "0.01..1"},
		{[]string{"throttle", "nobody", "0.5"}, exitFailure, "404"},
		{[]string{"extra"}, exitUsage, "unexpected argument"},
	} {
		var out, errb bytes.Buffer
		code := runNodes(ctx, append(tc.args, "--coordinator", url), &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("nodes %v: exit %d (%s), want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}

// TestNodesDrainAndUndrain: `heterps nodes drain` takes a node out of
// service (with no task, it is drained at once), the list says so, and
// undrain puts it back; an unknown node is a failure, a missing one a
// usage error.
func TestNodesDrainAndUndrain(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	url := startCoordinator(t)
	var reg api.RegisterResponse
	postJSON(t, url, "/v1/nodes/register", api.RegisterRequest{Name: "old", DataAddr: "127.0.0.1:7002", Type: "cpu-1t", Units: 1,
		CPUShare: 1, CPUShareMode: api.CPUShareNone}, &reg)
	ctx := context.Background()
	nodes := func(want int, args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := runNodes(ctx, append(args, "--coordinator", url), &out, &errb); code != want {
			t.Fatalf("nodes %v: exit %d, want %d: %s", args, code, want, errb.String())
		}
		return out.String(), errb.String()
	}
	if out, _ := nodes(exitOK, "drain", "old"); !strings.Contains(out, "node old ("+reg.NodeID+"): drained") {
		t.Errorf("nodes drain:\n%s", out)
	}
	if out, _ := nodes(exitOK); !strings.Contains(out, "alive, drained") {
		t.Errorf("nodes after the drain:\n%s", out)
	}
	if out, _ := nodes(exitOK, "undrain", reg.NodeID); !strings.Contains(out, "in service") {
		t.Errorf("nodes undrain:\n%s", out)
	}
	if out, _ := nodes(exitOK); strings.Contains(out, "drain") {
		t.Errorf("nodes after undrain:\n%s", out)
	}
	if _, errb := nodes(exitFailure, "drain", "nosuch"); !strings.Contains(errb, "404") {
		t.Errorf("draining an unknown node: %s", errb)
	}
	if _, errb := nodes(exitUsage, "drain"); !strings.Contains(errb, "want one NODE") {
		t.Errorf("drain without a node: %s", errb)
	}
}
