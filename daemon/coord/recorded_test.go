package coord

import (
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
