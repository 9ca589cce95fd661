package coord

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/syncbuf"
)

// TestAStalledCoordinatorDoesNotBlameItsNodes: when the coordinator itself
// did not run for longer than a heartbeat timeout (SIGSTOP, a paused VM),
// its nodes, whose heartbeats it could not read meanwhile, are not
// declared dead on its first look back; they get a timeout from then, and
// one that stays silent is declared dead after it. Without a stall, a
// silent node is declared dead past one timeout.
func TestAStalledCoordinatorDoesNotBlameItsNodes(t *testing.T) {
	var logs syncbuf.Buffer
	c, err := New(Config{Catalog: loadTestCatalog(t), HeartbeatInterval: interval, HeartbeatTimeout: timeout,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	register := func(name string, port int) string {
		r, err := c.register(newFakeNode(name, "cpu", 1, port).req)
		if err != nil {
			t.Fatal(err)
		}
		return r.NodeID
	}
	state := func(id string) api.NodeState {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.node(id).state
	}
	reapAt := func(at time.Time) {
		t.Helper()
		c.reap(at)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := c.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	quiet, silent := register("cpu-q", 7001), register("cpu-s", 7002)
	t0 := time.Now()
	reapAt(t0)
	reapAt(t0.Add(timeout / 8)) // ticking along
	if n := one(t, reg, "heterps_coordinator_stalls_total", nil); n != 0 {
		t.Errorf("%v stalls counted while the reaper ticked along", n)
	}
	stalledUntil := t0.Add(10 * timeout)
	reapAt(stalledUntil)
	if n := one(t, reg, "heterps_coordinator_stalls_total", nil); n != 1 {
		t.Errorf("heterps_coordinator_stalls_total = %v after one stall, want 1", n)
	}
	if state(quiet) != api.NodeAlive || state(silent) != api.NodeAlive {
		t.Fatalf("after the coordinator's own 10 s stall: %s, %s; want both alive", state(quiet), state(silent))
	}
	if !strings.Contains(logs.String(), "the coordinator did not run for a while") {
		t.Errorf("the stall is not logged:\n%s", logs.String())
	}
	c.mu.Lock()
	c.node(quiet).lastSeen = stalledUntil.Add(timeout / 2) // its queued heartbeat is read
	c.mu.Unlock()
	for at := stalledUntil; !at.After(stalledUntil.Add(timeout + timeout/4)); at = at.Add(timeout / 8) {
		reapAt(at)
	}
	if state(silent) != api.NodeDead {
		t.Errorf("a node silent for a whole timeout after the stall is %s, want dead", state(silent))
	}
	if state(quiet) != api.NodeAlive {
		t.Errorf("the node that heartbeat after the stall is %s, want alive", state(quiet))
	}
}

// TestANodeWhoseLeaseCannotOutlastAHeartbeatIsRefused: a lease shorter
// than two heartbeat intervals is refused at registration, naming the
// lease and what it needs; two intervals are enough.
func TestANodeWhoseLeaseCannotOutlastAHeartbeatIsRefused(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), HeartbeatInterval: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	short := newFakeNode("cpu-short", "cpu", 1, 7001).req
	short.LeaseMS = 1500
	_, err = c.register(short)
	if err == nil || !strings.Contains(err.Error(), "lease of 1.5s is shorter than two of this coordinator's heartbeat intervals (1s)") ||
		!strings.Contains(err.Error(), "give it a lease of 2s or more") {
		t.Errorf("a 1.5 s lease against 1 s heartbeats: %v", err)
	}
	enough := newFakeNode("cpu-enough", "cpu", 1, 7002).req
	enough.LeaseMS = 2000
	if _, err := c.register(enough); err != nil {
		t.Errorf("a 2 s lease against 1 s heartbeats: %v", err)
	}
}
