package coord

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// TestANodeGetsItsTasksOnlyOnceTheirPlacementIsRecorded: while the commit
// of a job's placement is held (a slow disk), the placed nodes' heartbeats
// are not answered with its tasks; once it lands they are. A coordinator
// killed in between comes back with the make-up its nodes run.
func TestANodeGetsItsTasksOnlyOnceTheirPlacementIsRecorded(t *testing.T) {
	tc := startCluster(t, func(c *Config) { c.StateDir = t.TempDir() })
	id := tc.submit(ctrJob) // no nodes yet: queued, its record on disk
	var hold atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { hold.Store(false); close(release) }) }
	t.Cleanup(letGo)
	hold.Store(true)
	tc.c.store.InjectCommitFault(func() error {
		if hold.Load() {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	})
	nodes := tc.nodesFor(tc.expectedPlan(ctrJob))
	waitFor(t, "the job placed", func() bool { return tc.job(id).State == api.JobRunning })
	select {
	case <-entered:
	case <-time.After(patience):
		t.Fatal("no commit was held")
	}
	handedOut := func() int {
		n := 0
		for _, node := range nodes {
			received, _, _ := node.snapshot()
			n += len(received)
		}
		return n
	}
	time.Sleep(300 * time.Millisecond) // 15 heartbeat intervals
	if n := handedOut(); n > 0 {
		t.Fatalf("%d task(s) handed out while the placement was not on disk", n)
	}
	letGo()
	waitFor(t, "the tasks handed out", func() bool { return handedOut() > 0 })
	if s := tc.waitJob(id); s.State != api.JobDone {
		t.Fatalf("job %s: %s", s.State, s.Reason)
	}
}

// TestARecordIsWaitedForAQuarterOfTheNodesLease: a heartbeat's answer
// waits for a commit no longer than a quarter of the node's lease (the
// node waits for an answer no longer than its lease, then fences), and
// never more than 5 s.
func TestARecordIsWaitedForAQuarterOfTheNodesLease(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), HeartbeatInterval: interval, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		lease, want time.Duration
	}{{time.Second, 250 * time.Millisecond}, {10 * time.Second, 2500 * time.Millisecond}, {time.Minute, 5 * time.Second}, {0, 5 * time.Second}} {
		req := newFakeNode(fmt.Sprintf("cpu-%d", i), "cpu", 1, 7001+i).req
		req.LeaseMS = tc.lease.Milliseconds()
		r, err := c.register(req)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		got := c.node(r.NodeID).recordWait()
		c.mu.Unlock()
		if got != tc.want {
			t.Errorf("lease %v: waits %v, want %v", tc.lease, got, tc.want)
		}
	}
}
