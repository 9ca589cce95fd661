package store

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/heterps/heterps/daemon/api"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// reopen opens the state in dir again and loads it.
func reopen(t *testing.T, dir string) *State {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func must(t *testing.T, c <-chan error) {
	t.Helper()
	if err := <-c; err != nil {
		t.Fatal(err)
	}
}

func TestJobsAndCountersSurviveReopening(t *testing.T) {
	s, dir := openTemp(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	j := Job{ID: "j7", Seq: 7, Source: "name = \"x\"", State: api.JobRunning, Generation: 3, Submitted: now, IdempotencyKey: "key-1",
		Tasks:  []Task{{Spec: api.Task{TaskID: "j7.s0.r0", JobID: "j7", Role: api.RoleStage, Batch: 512}, Node: "n-a"}},
		Latest: &api.CheckpointStatus{Step: 40, Dir: "/ck/step-0000000040"}}
	must(t, s.PutJob(Job{ID: "j9", Seq: 9, State: api.JobPending, Submitted: now}))
	must(t, s.PutJob(j))
	must(t, s.PutCounters(Counters{LastJob: 9, LastNode: 4}))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := reopen(t, dir)
	if st.Counters != (Counters{LastJob: 9, LastNode: 4}) {
		t.Errorf("counters %+v", st.Counters)
	}
	if len(st.Jobs) != 2 || st.Jobs[0].ID != "j7" || st.Jobs[1].ID != "j9" {
		t.Fatalf("jobs %+v, want j7 then j9 (submission order)", st.Jobs)
	}
	got := st.Jobs[0]
	if got.Generation != 3 || got.Tasks[0].Node != "n-a" || got.Tasks[0].Spec.Batch != 512 || got.Latest.Step != 40 || !got.Submitted.Equal(now) {
		t.Errorf("job read back as %+v", got)
	}
	if got.IdempotencyKey != "key-1" {
		t.Errorf("idempotency key %q, want key-1", got.IdempotencyKey)
	}
}

func TestALaterRecordReplacesAndDeleteForgets(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	must(t, s.PutJob(Job{ID: "j1", Seq: 1, State: api.JobPending}))
	must(t, s.PutJob(Job{ID: "j1", Seq: 1, State: api.JobDone}))
	must(t, s.PutJob(Job{ID: "j2", Seq: 2, State: api.JobDone}))
	must(t, s.DeleteJob("j2"))
	st, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Jobs) != 1 || st.Jobs[0].State != api.JobDone {
		t.Fatalf("jobs %+v, want j1 done only", st.Jobs)
	}
}

// Many concurrent writers share commits: every write is durable once its
// channel yields nil.
func TestConcurrentWritesAllLand(t *testing.T) {
	s, dir := openTemp(t)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			id := "j" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
			if err := <-s.PutJob(Job{ID: id, Seq: uint64(i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	s.Close()
	if st := reopen(t, dir); len(st.Jobs) != 200 {
		t.Fatalf("%d jobs after 200 acknowledged writes", len(st.Jobs))
	}
}

func TestASecondCoordinatorOnTheSameDirectoryIsRefused(t *testing.T) {
	s, dir := openTemp(t)
	defer s.Close()
	_, err := Open(dir)
	if err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v, want a lock error", err)
	}
}

func TestWritesAfterCloseFail(t *testing.T) {
	s, _ := openTemp(t)
	s.Close()
	if err := <-s.PutJob(Job{ID: "j1"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
}

func TestUnreadableStateIsRefusedNotDropped(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(strings.Repeat("\x00garbage", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir); err == nil {
		s.Close()
		t.Fatal("opened a corrupt database")
	}
}

// TestProfilesSurviveReopening: measured profiles are kept per (model,
// type), a later one replaces the earlier of the same pair, and a deleted
// one is gone after reopening.
func TestProfilesSurviveReopening(t *testing.T) {
	s, dir := openTemp(t)
	at := time.Now().UTC().Truncate(time.Millisecond)
	layers := []ProfileLayer{{Name: "emb", OCT: 0.5, ODT: 0.01, Alpha: 0.9, Beta: 0.8}, {Name: "fc", OCT: 0.25, Alpha: 1}}
	must(t, s.PutProfile(Profile{Model: "ctrdnn", Type: "cpu", ProfileBatch: 256, Fingerprint: "f1", StoredAt: at, Layers: layers}))
	must(t, s.PutProfile(Profile{Model: "ctrdnn", Type: "gpu", ProfileBatch: 256, StoredAt: at, Layers: layers}))
	must(t, s.PutProfile(Profile{Model: "mine", Type: "cpu", ProfileBatch: 64, StoredAt: at, Layers: layers[:1]}))
	must(t, s.PutProfile(Profile{Model: "ctrdnn", Type: "cpu", ProfileBatch: 512, Fingerprint: "f1", StoredAt: at, Layers: layers}))
	must(t, s.DeleteProfile("ctrdnn", "gpu"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := reopen(t, dir)
	if len(st.Profiles) != 2 {
		t.Fatalf("profiles %+v, want ctrdnn/cpu and mine/cpu", st.Profiles)
	}
	got := st.Profiles[0]
	if got.Model != "ctrdnn" || got.Type != "cpu" || got.ProfileBatch != 512 || got.Fingerprint != "f1" || !got.StoredAt.Equal(at) ||
		len(got.Layers) != 2 || got.Layers[0] != layers[0] {
		t.Errorf("ctrdnn/cpu read back as %+v", got)
	}
	if m := st.Profiles[1]; m.Model != "mine" || len(m.Layers) != 1 {
		t.Errorf("mine/cpu read back as %+v", m)
	}
}

// The drained nodes' names survive a reopening; a later record replaces
// the earlier, an empty one drains none.
func TestDrainedNodesSurviveReopening(t *testing.T) {
	s, dir := openTemp(t)
	must(t, s.PutDrained([]string{"a", "c"}))
	must(t, s.PutDrained([]string{"b", "c"}))
	s.Close()
	if st := reopen(t, dir); strings.Join(st.Drained, ",") != "b,c" {
		t.Errorf("drained %v, want b,c", st.Drained)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.PutDrained(nil))
	s.Close()
	if st := reopen(t, dir); len(st.Drained) != 0 {
		t.Errorf("drained %v after an empty record", st.Drained)
	}
}

// The throttles' shares survive a reopening, a later record replacing
// the earlier; a share out of range in the record (a database edited or
// damaged) is refused, naming the node, rather than handed to it.
func TestThrottlesSurviveReopening(t *testing.T) {
	s, dir := openTemp(t)
	must(t, s.PutThrottles(map[string]float64{"a": 0.5, "b": 0.25}))
	must(t, s.PutThrottles(map[string]float64{"a": 1, "c": 0.1}))
	s.Close()
	if st := reopen(t, dir); !maps.Equal(st.Throttles, map[string]float64{"a": 1, "c": 0.1}) {
		t.Errorf("throttles %v, want a: 1, c: 0.1", st.Throttles)
	}
	for _, bad := range []string{`{"a": 0.5, "slow": 7}`, `{"slow": 0}`, `[0.5]`} {
		db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyThrottles, []byte(bad)) }); err != nil {
			t.Fatal(err)
		}
		db.Close()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Load()
		s.Close()
		if err == nil || !strings.Contains(err.Error(), "throttles") || (bad != `[0.5]` && !strings.Contains(err.Error(), `node "slow"`)) {
			t.Errorf("loading throttles %s: %v, want an error naming the record and the node", bad, err)
		}
	}
}

// TestHealthReportsAFailedCommitUntilOneSucceeds: a commit that fails
// (here a key bbolt refuses; a full disk alike) is counted and its error
// kept until a later commit succeeds.
func TestHealthReportsAFailedCommitUntilOneSucceeds(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	if n, err := s.Health(); n != 0 || err != nil {
		t.Fatalf("a new store: %d failures, %v", n, err)
	}
	if err := <-s.PutJob(Job{ID: strings.Repeat("j", 40000)}); err == nil {
		t.Fatal("a 40,000-byte key was committed")
	}
	if n, err := s.Health(); n != 1 || err == nil {
		t.Fatalf("after a failed commit: %d failures, %v", n, err)
	}
	if err := <-s.PutJob(Job{ID: "j1"}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Health(); n != 1 || err != nil {
		t.Fatalf("after a commit that succeeded: %d failures, %v; want the count kept and no error", n, err)
	}
}

// shortRetries spaces the retries of failed commits 20 ms, doubling to
// 200 ms, for the test: every failed commit doubles the space, so a burst
// of them at 1 s doubling to 30 s could leave the next retry after the
// test's wait.
func shortRetries(t *testing.T) {
	first, last := firstRetry, lastRetry
	firstRetry, lastRetry = 20*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { firstRetry, lastRetry = first, last })
}

// fullDisk makes s's commits fail with ENOSPC while it is set.
func fullDisk(s *Store) *atomic.Bool {
	var full atomic.Bool
	s.InjectCommitFault(func() error {
		if full.Load() {
			return fmt.Errorf("write %s: %w", s.path, syscall.ENOSPC)
		}
		return nil
	})
	return &full
}

// waitHealthy waits up to 10 s for a commit to succeed.
func waitHealthy(t *testing.T, s *Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := s.Health(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			_, err := s.Health()
			t.Fatalf("no commit succeeded within 10 s of the disk being freed: %v", err)
		}
	}
}

// TestAFailedCommitIsRetriedOnceTheDiskIsFree: the writes of commits that
// failed on a full disk land by themselves once it is freed, with no later
// write to carry them: the latest record of each key, deletions included.
func TestAFailedCommitIsRetriedOnceTheDiskIsFree(t *testing.T) {
	shortRetries(t)
	s, dir := openTemp(t)
	full := fullDisk(s)
	must(t, s.PutJob(Job{ID: "j3", Seq: 3, State: api.JobDone}))
	full.Store(true)
	for _, c := range []<-chan error{
		s.PutJob(Job{ID: "j1", Seq: 1, State: api.JobPending}),
		s.PutJob(Job{ID: "j1", Seq: 1, State: api.JobRunning}),
		s.PutJob(Job{ID: "j2", Seq: 2, State: api.JobPending}),
		s.DeleteJob("j3"),
		s.PutCounters(Counters{LastJob: 3, LastNode: 1}),
	} {
		if err := <-c; !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("a commit on a full disk: %v, want ENOSPC", err)
		}
	}
	time.Sleep(300 * time.Millisecond) // a retry fails too
	if n, err := s.Health(); n < 2 || err == nil {
		t.Fatalf("%d failed commits, latest %v; want the retry counted", n, err)
	}
	full.Store(false)
	waitHealthy(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := reopen(t, dir)
	if len(st.Jobs) != 2 || st.Jobs[0].ID != "j1" || st.Jobs[0].State != api.JobRunning || st.Jobs[1].ID != "j2" {
		t.Errorf("jobs %+v, want j1 running and j2 (j3 deleted)", st.Jobs)
	}
	if st.Counters != (Counters{LastJob: 3, LastNode: 1}) {
		t.Errorf("counters %+v", st.Counters)
	}
}

// TestAWriteNoCommitCanStoreDoesNotHoldBackTheOthers: a record bbolt
// refuses fails the commit it is in, but is not retried with the rest.
func TestAWriteNoCommitCanStoreDoesNotHoldBackTheOthers(t *testing.T) {
	shortRetries(t)
	s, dir := openTemp(t)
	full := fullDisk(s)
	full.Store(true)
	tooLong, good := s.PutJob(Job{ID: strings.Repeat("j", 40000)}), s.PutJob(Job{ID: "j1", Seq: 1})
	if err := <-tooLong; err == nil {
		t.Fatal("a 40,000-byte key was committed")
	}
	<-good
	full.Store(false)
	waitHealthy(t, s)
	s.Close()
	if st := reopen(t, dir); len(st.Jobs) != 1 || st.Jobs[0].ID != "j1" {
		t.Errorf("jobs %+v, want j1 alone", st.Jobs)
	}
}

// TestFlushedWaitsForTheCommitUnderWay: Flushed yields only once the
// writes handed over before it are on disk, also while their commit is
// already under way; at once when nothing is pending, and at once, with
// the error, while commits fail.
func TestFlushedWaitsForTheCommitUnderWay(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	if err := <-s.Flushed(); err != nil {
		t.Fatalf("nothing pending: %v", err)
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer letGo() // before Close, which waits for the held commit
	s.InjectCommitFault(func() error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return nil
	})
	put := s.PutJob(Job{ID: "j1"})
	<-entered // the commit is under way, held
	flushed := s.Flushed()
	select {
	case err := <-flushed:
		t.Fatalf("Flushed yielded %v while the commit was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	letGo()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-put:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("Flushed yielded before the write's own commit had")
	}
	s.InjectCommitFault(func() error { return syscall.ENOSPC })
	if err := <-s.PutJob(Job{ID: "j2"}); err == nil {
		t.Fatal("a commit failed by the fault succeeded")
	}
	select {
	case err := <-s.Flushed():
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("while commits fail: %v, want ENOSPC", err)
		}
	case <-time.After(500 * time.Millisecond):
		t.Fatal("Flushed waited for a retry while commits fail")
	}
}
