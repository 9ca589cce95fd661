package node

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/internal/syncbuf"
	"github.com/heterps/heterps/native"
)

// blockCheckpoint makes step's checkpoint directory under root
// impossible to create: a file stands where it would be.
func blockCheckpoint(t *testing.T, root string, step int64) {
	t.Helper()
	if err := os.WriteFile(ckpt.StepDir(root, step), []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkpointCluster serves a coordinator that logs into logs and waits
// finalWait for a job's last checkpoint (also while it is reported
// failing), and two CPU nodes.
func checkpointCluster(t *testing.T, logs *syncbuf.Buffer, finalWait time.Duration) *cluster {
	t.Helper()
	return loggedCluster(t, logs, func(c *coord.Config) { c.FinalCheckpointWait, c.FinalCheckpointFailWait = finalWait, finalWait })
}

// loggedCluster serves a coordinator that logs into logs, its config
// adjusted, and two CPU nodes.
func loggedCluster(t *testing.T, logs *syncbuf.Buffer, adjust func(*coord.Config)) *cluster {
	t.Helper()
	rc := startRestartableCoordinatorWith(t, func(c *coord.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		adjust(c)
	})
	t.Cleanup(func() { rc.stop() })
	cl := rc.cluster()
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)
	return cl
}

// TestACheckpointThatCannotBeWrittenLeavesTrainingGoing: when a step's
// checkpoint cannot be written (here a file stands where its directory
// goes; a full disk does the same), the nodes say so and train on, the
// next checkpoints are written, and the job ends done with no restart.
func TestACheckpointThatCannotBeWrittenLeavesTrainingGoing(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the cluster's cleanups
	var logs syncbuf.Buffer
	cl := checkpointCluster(t, &logs, 0)
	root := t.TempDir()
	blockCheckpoint(t, root, 5)
	s := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\nrestarts = 2\n", root))), final)
	if s.State != api.JobDone || s.Reason != "" || s.Restarts != 0 || s.RestartedAs != "" {
		t.Fatalf("job %s (%q), %d restarts, restarted as %q", s.State, s.Reason, s.Restarts, s.RestartedAs)
	}
	if s.Checkpoint == nil || s.Checkpoint.Step != 20 || s.CheckpointFailure != nil || s.CheckpointFailures != 2 {
		t.Fatalf("latest checkpoint %+v, failure %+v, %d failures: want step 20, the failure of step 5 resolved and counted on both PS nodes",
			s.Checkpoint, s.CheckpointFailure, s.CheckpointFailures)
	}
	for _, step := range []int64{10, 15, 20} {
		if m, err := ckpt.VerifyDir(ckpt.StepDir(root, step)); err != nil || m.Step != step {
			t.Errorf("step %d: %+v (%v)", step, m, err)
		}
	}
	if got := logs.String(); !strings.Contains(got, "checkpoint not written; training goes on") || !strings.Contains(got, "step=5") {
		t.Errorf("the coordinator did not say that step 5's checkpoint was not written:\n%s", got)
	}
}

// TestALastCheckpointThatCannotBeWrittenIsNamed: the last step's
// checkpoint, which a job waits for, is tried again until the wait ends;
// the job then ends done (it trained every step) with the reason its
// checkpoint is missing, and is not restarted to train again.
func TestALastCheckpointThatCannotBeWrittenIsNamed(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the cluster's cleanups
	shortFinalRetry(t)
	var logs syncbuf.Buffer
	cl := checkpointCluster(t, &logs, 2*time.Second)
	root := t.TempDir()
	blockCheckpoint(t, root, 20)
	s := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\nrestarts = 2\n", root))), final)
	if s.State != api.JobDone || s.Restarts != 0 || s.RestartedAs != "" ||
		!strings.Contains(s.Reason, "the checkpoint of step 20 could not be written within 2s (node ") {
		t.Fatalf("job %s (%q), %d restarts, restarted as %q, checkpoint %+v:\n%s", s.State, s.Reason, s.Restarts, s.RestartedAs, s.Checkpoint, logs.String())
	}
	if s.Checkpoint == nil || s.Checkpoint.Step != 15 || s.CheckpointFailure == nil || s.CheckpointFailure.Step != 20 || s.CheckpointFailures != 2 {
		t.Fatalf("latest checkpoint %+v, failure %+v, %d failures: want step 15 and the failure of step 20, counted once on each PS node",
			s.Checkpoint, s.CheckpointFailure, s.CheckpointFailures)
	}
	if n := strings.Count(logs.String(), "checkpoint not written; the job has trained"); n < 2 {
		t.Errorf("the last checkpoint was tried %d time(s) in the coordinator's log, want it tried again", n)
	}
}

// TestALastCheckpointIsWrittenOnceItCanBe: the last checkpoint, tried
// again while the job waits for it, is written once what stood in its
// way is gone (an operator freed the disk), and the job ends done with it.
func TestALastCheckpointIsWrittenOnceItCanBe(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the cluster's cleanups
	shortFinalRetry(t)
	var logs syncbuf.Buffer
	cl := checkpointCluster(t, &logs, patience)
	root := t.TempDir()
	blockCheckpoint(t, root, 20)
	id := cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", root)))
	waitUntil(t, "the last checkpoint's failure reported", func() bool {
		return strings.Contains(logs.String(), "checkpoint not written; the job has trained") && strings.Contains(logs.String(), "step=20")
	})
	if err := os.Remove(ckpt.StepDir(root, 20)); err != nil {
		t.Fatal(err)
	}
	s := cl.waitJob(id, final)
	if s.State != api.JobDone || s.Reason != "" || s.Checkpoint == nil || s.Checkpoint.Step != 20 || s.CheckpointFailure != nil {
		t.Fatalf("job %s (%q), checkpoint %+v, failure %+v", s.State, s.Reason, s.Checkpoint, s.CheckpointFailure)
	}
	if m, err := ckpt.VerifyDir(ckpt.StepDir(root, 20)); err != nil || m.Step != 20 {
		t.Errorf("step 20: %+v (%v)", m, err)
	}
}

// TestAHungCheckpointWriteIsReported: a copy that writes nothing for
// checkpointStuckAfter (a hung filesystem; here a write held until the
// test lets it go) is reported as not written while it hangs,
// training goes on, and once it ends every checkpoint is written and the
// job ends done.
func TestAHungCheckpointWriteIsReported(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the cluster's cleanups
	release := make(chan struct{})
	var once sync.Once
	hangAt(t, 5, release)
	stuck := checkpointStuckAfter
	checkpointStuckAfter = 100 * time.Millisecond
	t.Cleanup(func() { checkpointStuckAfter = stuck })
	var logs syncbuf.Buffer
	cl := checkpointCluster(t, &logs, 0)
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the cluster stops, if the test failed
	root := t.TempDir()
	id := cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", root)))
	waitUntil(t, "the hung write reported", func() bool { return logs.Contains("no byte written for") })
	once.Do(func() { close(release) })
	s := cl.waitJob(id, final)
	if s.State != api.JobDone || s.Reason != "" || s.Checkpoint == nil || s.Checkpoint.Step != 20 || s.CheckpointFailure != nil || s.CheckpointFailures < 1 {
		t.Fatalf("job %s (%q), checkpoint %+v, failure %+v, %d failures", s.State, s.Reason, s.Checkpoint, s.CheckpointFailure, s.CheckpointFailures)
	}
	for _, step := range []int64{5, 10, 15, 20} {
		if m, err := ckpt.VerifyDir(ckpt.StepDir(root, step)); err != nil || m.Step != step {
			t.Errorf("step %d: %+v (%v)", step, m, err)
		}
	}
}

// TestACheckpointSkippedBehindASlowWriteIsReported: steps that training
// passes while the writer is held up by an earlier copy are not
// checkpointed, and are reported as such; the job still ends done with its
// last checkpoint.
func TestACheckpointSkippedBehindASlowWriteIsReported(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the cluster's cleanups
	release := make(chan struct{})
	var once sync.Once
	hangAt(t, 5, release)
	var logs syncbuf.Buffer
	cl := checkpointCluster(t, &logs, 0)
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the cluster stops, if the test failed
	root := t.TempDir()
	id := cl.submit(dpJobOf(t, 200, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", root)))
	cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 100 || s.State.Final() })
	once.Do(func() { close(release) })
	s := cl.waitJob(id, final)
	if s.State != api.JobDone || s.Reason != "" || s.Checkpoint == nil || s.Checkpoint.Step != 200 {
		t.Fatalf("job %s (%q), checkpoint %+v", s.State, s.Reason, s.Checkpoint)
	}
	if !logs.Contains("skipped: training passed its step") || s.CheckpointFailures < 1 {
		t.Errorf("%d failures counted, and the coordinator's log has no skipped checkpoint:\n%s", s.CheckpointFailures, logs.String())
	}
}

// TestALargeLastCheckpointIsWaitedForWhileItIsWritten: a job whose last
// checkpoint takes longer to write than the coordinator waits for it
// (here 3 s, a megabyte every 100 ms, against a wait of 500 ms, and of 1 s
// after the last report of more bytes) ends done with that checkpoint
// complete, not without it: the PS nodes report how far the write has
// got, and the job waits while it gets further.
func TestALargeLastCheckpointIsWaitedForWhileItIsWritten(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the cluster's cleanups
	write := writeSnapshots
	writeSnapshots = func(dir string, shards []*ps.Shard, snaps []ps.Snapshot, written *atomic.Int64) ([]ckpt.FileEntry, error) {
		if dir == ckpt.StepDir(filepath.Dir(dir), 20) {
			for range 30 {
				written.Add(1 << 20)
				time.Sleep(100 * time.Millisecond)
			}
		}
		return write(dir, shards, snaps, written)
	}
	t.Cleanup(func() { writeSnapshots = write })
	stuck := checkpointStuckAfter
	checkpointStuckAfter = time.Second // the nodes look at the write every 100 ms
	t.Cleanup(func() { checkpointStuckAfter = stuck })
	var logs syncbuf.Buffer
	cl := loggedCluster(t, &logs, func(c *coord.Config) {
		c.FinalCheckpointWait, c.FinalCheckpointFailWait = 500*time.Millisecond, time.Second
	})
	root := t.TempDir()
	id := cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", root)))
	s := cl.waitJob(id, func(s api.JobStatus) bool {
		return (s.CheckpointWriting != nil && s.CheckpointWriting.Step == 20) || s.State.Final()
	})
	if w := s.CheckpointWriting; w == nil || w.Step != 20 || w.Bytes < 1<<20 {
		t.Errorf("the job's status while its last checkpoint is written: %+v, want step 20 and the megabytes so far", w)
	}
	s = cl.waitJob(id, final)
	if s.State != api.JobDone || s.Reason != "" || s.Checkpoint == nil || s.Checkpoint.Step != 20 || len(s.PS) != 2 {
		t.Fatalf("job %s (%q), checkpoint %+v, PS on %v; want done with the checkpoint of step 20 from two PS nodes", s.State, s.Reason, s.Checkpoint, s.PS)
	}
	if m, err := ckpt.VerifyDir(ckpt.StepDir(root, 20)); err != nil || m.Step != 20 {
		t.Errorf("the last checkpoint: %+v (%v)", m, err)
	}
}

// hangAt makes the writes of step's checkpoint files wait for release,
// until the test's cleanups.
func hangAt(t *testing.T, step int64, release <-chan struct{}) {
	write := writeSnapshots
	writeSnapshots = func(dir string, shards []*ps.Shard, snaps []ps.Snapshot, written *atomic.Int64) ([]ckpt.FileEntry, error) {
		if dir == ckpt.StepDir(filepath.Dir(dir), step) {
			<-release
		}
		return write(dir, shards, snaps, written)
	}
	t.Cleanup(func() { writeSnapshots = write })
}

// TestAFailedWriteRemovesOnlyItsOwnFiles: what a failed checkpoint write
// left of this node's shard files goes, and the step directory with it
// when empty; other nodes' files, a complete checkpoint (another job's,
// with its manifest) and a file standing where the directory would be
// stay.
func TestAFailedWriteRemovesOnlyItsOwnFiles(t *testing.T) {
	shard, err := ps.NewShard(ps.Config{Job: "j1", Shard: 1, Shards: 2, Replicas: map[int]int{0: 1}, Backend: native.MustCPU()})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	write := func(path string) {
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	shared, alone, blocked, complete := ckpt.StepDir(root, 5), ckpt.StepDir(root, 10), ckpt.StepDir(root, 15), ckpt.StepDir(root, 20)
	for _, dir := range []string{shared, alone, complete} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(dir, shard.FileName()))
	}
	other := filepath.Join(shared, ps.FileName(0, 2))
	write(other)
	write(blocked)
	write(filepath.Join(complete, ckpt.ManifestName))
	for _, dir := range []string{shared, alone, blocked, complete} {
		removeShardFiles(dir, []*ps.Shard{shard})
	}
	if _, err := os.Stat(filepath.Join(complete, shard.FileName())); err != nil {
		t.Errorf("a complete checkpoint's file went: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shared, shard.FileName())); !os.IsNotExist(err) {
		t.Errorf("this node's half-written file stayed: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another node's file went: %v", err)
	}
	if _, err := os.Stat(alone); !os.IsNotExist(err) {
		t.Errorf("the emptied step directory stayed: %v", err)
	}
	if fi, err := os.Stat(blocked); err != nil || fi.IsDir() {
		t.Errorf("the file where the step directory would be went: %v", err)
	}
}

// shortFinalRetry makes the last checkpoint tried every 50 ms until the
// test's cleanups, the cluster's included, are done.
func shortFinalRetry(t *testing.T) {
	d := finalCheckpointRetry
	finalCheckpointRetry = 50 * time.Millisecond
	t.Cleanup(func() { finalCheckpointRetry = d })
}

// waitUntil polls cond until it holds, for at most patience.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
