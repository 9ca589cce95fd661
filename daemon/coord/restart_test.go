package coord

import (
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// TestRestartWaitsForEveryNodeToSettle: a restarting job is due only once
// each of its nodes has heartbeated since the failure or been declared
// dead, so that a node that has just died is not planned on again.
func TestRestartWaitsForEveryNodeToSettle(t *testing.T) {
	failed := time.Now()
	a := &node{state: api.NodeAlive, lastSeen: failed.Add(-time.Millisecond)}
	b := &node{state: api.NodeAlive, lastSeen: failed.Add(-time.Millisecond)}
	j := &job{state: api.JobRestarting, failedAt: failed}
	j.tasks = []*taskRun{{job: j, node: a}, {job: j, node: b}}
	c := &Coordinator{jobs: []*job{j}}
	if due := c.dueRestarts(time.Now()); len(due) != 0 {
		t.Fatal("due before any node was heard from")
	}
	a.lastSeen = failed.Add(time.Millisecond) // a heartbeats
	if due := c.dueRestarts(time.Now()); len(due) != 0 {
		t.Fatal("due while b, silent, may be dead")
	}
	b.state = api.NodeDead
	if due := c.dueRestarts(time.Now()); len(due) != 1 || due[0] != j {
		t.Fatalf("due %v once a heartbeated and b is dead, want the job", due)
	}
	if due := c.dueRestarts(time.Now()); len(due) != 0 {
		t.Fatal("due twice")
	}
}
