package coord

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/store"
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

// writeFakeCheckpoint writes a one-file checkpoint of job at step under
// root, complete with its manifest.
func writeFakeCheckpoint(t *testing.T, root, job string, step int64) string {
	t.Helper()
	dir := ckpt.StepDir(root, step)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ps.FileName(0, 1))
	if err := os.WriteFile(path, []byte(fmt.Sprintf("shard of %s at %d", job, step)), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := ckpt.DigestFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.WriteManifest(dir, job, step, 1, []ckpt.FileEntry{e}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRestartTakesTheNewestCheckpointOfItsChain: of the complete
// checkpoints under the job's directory, a restart takes the newest one a
// job of its chain wrote that verifies, not the coordinator's last known
// one nor another job's; a damaged newest one falls back to the next.
func TestRestartTakesTheNewestCheckpointOfItsChain(t *testing.T) {
	root := t.TempDir()
	for _, step := range []int64{140, 160, 180} {
		writeFakeCheckpoint(t, root, "j1", step)
	}
	writeFakeCheckpoint(t, root, "j9", 200) // another job's, same directory
	chain := map[string]bool{"j1": true, "j2": true}
	known := &api.CheckpointStatus{Step: 140, Dir: ckpt.StepDir(root, 140)}
	got, err := newestVerified(root, chain, known, 1000)
	if err != nil || got == nil || got.Step != 180 {
		t.Fatalf("picked %+v (%v), want step 180", got, err)
	}
	if err := os.WriteFile(filepath.Join(ckpt.StepDir(root, 180), ps.FileName(0, 1)), []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err = newestVerified(root, chain, known, 1000); err != nil || got.Step != 160 {
		t.Fatalf("with step 180 damaged: picked %+v (%v), want step 160", got, err)
	}
	if got, err = newestVerified(root, chain, known, 150); err != nil || got.Step != 140 {
		t.Fatalf("a 150-step job: picked %+v (%v), want step 140 (no steps left after 160)", got, err)
	}
}

// TestRestartsBackOffAndAvoidTheNodesThatFailed: a failed job is due only
// after its backoff, which doubles per restart; its restart avoids the
// nodes that died with it (not the ones whose tasks failed in their
// wake) until the suspicion expires.
func TestRestartsBackOffAndAvoidTheNodesThatFailed(t *testing.T) {
	c := &Coordinator{cfg: Config{RestartBackoff: time.Second, MaxRestartBackoff: 3 * time.Second, Logger: slog.New(slog.DiscardHandler)}.withDefaults()}
	c.log = c.cfg.Logger
	now := time.Now()
	for restarts, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		j := &job{id: "j1", file: &config.Job{Checkpoint: config.JobCheckpoint{Restarts: 10}}, state: api.JobRunning, restarts: restarts}
		c.jobs = []*job{j}
		c.failRunning(j, "node a died", now, lostNode{name: "a", dead: true})
		if got := j.notBefore.Sub(now); got != want {
			t.Errorf("after %d restarts: backoff %s, want %s", restarts, got, want)
		}
		if due := c.dueRestarts(now.Add(want - time.Millisecond)); len(due) != 0 {
			t.Errorf("after %d restarts: due before its backoff", restarts)
		}
		if due := c.dueRestarts(now.Add(want)); len(due) != 1 {
			t.Errorf("after %d restarts: not due once its backoff passed", restarts)
		}
	}
	j := &job{file: &config.Job{}, lost: []lostNode{{name: "b"}, {name: "a", dead: true}}}
	sus := j.nextSuspects(now, time.Minute)
	if len(sus) != 1 || sus[0].Node != "a" {
		t.Fatalf("suspects %+v, want only a, which died", sus)
	}
	j.suspects = sus
	if !j.suspect("a", now.Add(30*time.Second)) || j.suspect("a", now.Add(2*time.Minute)) || j.suspect("b", now) {
		t.Error("suspicion of a should last a minute, and b is not suspect")
	}
}

// TestSuspectsAreAPreference: a job whose only usable node is one that
// failed it runs there rather than waiting for the suspicion to expire.
func TestSuspectsAreAPreference(t *testing.T) {
	tc := startCluster(t, nil)
	tc.start(newFakeNode("only", "cpu", 4, 7601))
	jf, err := config.ParseJob(jobFileName, []byte(ctrJob+"method = \"cpu\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	j := &job{source: ctrJob, file: jf, state: api.JobPending, submitted: time.Now(),
		suspects: []store.Suspect{{Node: "only", Until: time.Now().Add(time.Hour)}}}
	if err := tc.c.check(j); err != nil {
		t.Fatal(err)
	}
	tc.c.mu.Lock()
	err = tc.c.enqueue(j)
	tc.c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if s := tc.waitJob(j.id); s.State != api.JobDone {
		t.Fatalf("%s %q", s.State, s.Reason)
	}
}

// enqueueAs queues the job file src as a restart of the job restartOf
// ("": as a new job) would be.
func (tc *testCluster) enqueueAs(src, restartOf string) *job {
	tc.t.Helper()
	jf, err := config.ParseJob(jobFileName, []byte(src))
	if err != nil {
		tc.t.Fatal(err)
	}
	j := &job{source: src, file: jf, state: api.JobPending, submitted: time.Now(), restartOf: restartOf}
	if err := tc.c.check(j); err != nil {
		tc.t.Fatal(err)
	}
	tc.c.mu.Lock()
	defer tc.c.mu.Unlock()
	if err := tc.c.enqueue(j); err != nil {
		tc.t.Fatal(err)
	}
	return j
}

// TestRestartRunsBelowItsLimitOnTheSurvivors: a restarted job whose
// throughput_limit the free live units cannot reach runs on them at the
// most they reach and says so, to the end; a new job of the same file
// waits for units instead.
func TestRestartRunsBelowItsLimitOnTheSurvivors(t *testing.T) {
	tc := startCluster(t, nil)
	tc.start(newFakeNode("survivor", "cpu", 2, 7621))
	// The cheapest plan on cpu units takes one; 2.5 times its throughput
	// needs more than the survivor's 2, and the catalog has 8.
	one := tc.expectedPlan(ctrJob + "method = \"cpu\"\nthroughput_limit = 1\n")
	limit := 2.5 * one.Throughput
	src := ctrJob + fmt.Sprintf("method = \"cpu\"\nthroughput_limit = %.0f\n", limit)
	if p := tc.expectedPlan(src); p.Stages[0].Units <= 2 {
		t.Fatalf("the catalog reaches %.0f samples/s with %d units: the test needs more than the survivor's 2", limit, p.Stages[0].Units)
	}
	restarted := tc.enqueueAs(src, "j0")
	s := tc.waitJob(restarted.id)
	if s.State != api.JobDone || !strings.HasPrefix(s.Reason, belowLimit) {
		t.Fatalf("restart: %s %q, want done below its limit", s.State, s.Reason)
	}
	tc.c.mu.Lock()
	plan := restarted.plan
	tc.c.mu.Unlock()
	if plan.Stages[0].Units != 2 || plan.Throughput >= limit {
		t.Fatalf("restart planned %d units at %.0f samples/s, want the survivor's 2 below %.0f", plan.Stages[0].Units, plan.Throughput, limit)
	}
	fresh := tc.enqueueAs(src, "")
	deadline := time.Now().Add(patience)
	for s = tc.job(fresh.id); s.State != api.JobQueued && time.Now().Before(deadline); s = tc.job(fresh.id) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.State != api.JobQueued || !strings.Contains(s.Reason, "waiting for units") {
		t.Fatalf("new job: %s %q, want it queued waiting for units", s.State, s.Reason)
	}
}

// TestCheckpointsBeyondKeepAreRemoved: as each checkpoint completes, the
// coordinator removes the job's complete checkpoints beyond its newest
// checkpoint.keep; keep = 0 keeps them all.
func TestCheckpointsBeyondKeepAreRemoved(t *testing.T) {
	for keep, want := range map[int]int{2: 2, 0: 20} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			tc, tr, src, _ := raiseFixture(t, 8)
			src = strings.Replace(src, "keep = 0", fmt.Sprintf("keep = %d", keep), 1)
			jf, _ := jobAndModel(t, src)
			tc.start(tr.node("a", "cpu", 8, 9151))
			if s := tc.waitJob(tc.submit(src)); s.State != api.JobDone || s.Checkpoint == nil || s.Checkpoint.Step != 200 {
				t.Fatalf("job %s %q, checkpoint %+v", s.State, s.Reason, s.Checkpoint)
			}
			var steps []int64
			waitFor(t, fmt.Sprintf("%d checkpoints left", want), func() bool {
				steps = completeSteps(t, jf.Checkpoint.Dir)
				return len(steps) == want
			})
			if steps[len(steps)-1] != 200 || (keep == 2 && steps[0] != 190) {
				t.Errorf("kept steps %v", steps)
			}
		})
	}
}

// completeSteps is the steps of the complete checkpoints under root,
// ascending.
func completeSteps(t *testing.T, root string) []int64 {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, e := range entries {
		if m, err := ckpt.ReadManifest(filepath.Join(root, e.Name())); err == nil {
			steps = append(steps, m.Step)
		}
	}
	return steps
}

// removeBeyond keeps the newest keep complete checkpoints of the jobs it
// owns and removes their older ones; an incomplete step directory,
// another job's checkpoint, a link, and whatever is not a step directory
// stay.
func TestRemoveBeyondKeepsTheNewest(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, step := range []int64{10, 20, 30, 40} {
		dirs = append(dirs, writeFakeCheckpoint(t, root, "j1", step))
	}
	other := writeFakeCheckpoint(t, root, "j9", 5)
	partial := ckpt.StepDir(root, 50) // being written: no manifest
	if err := os.MkdirAll(partial, 0o755); err != nil {
		t.Fatal(err)
	}
	linked := writeFakeCheckpoint(t, t.TempDir(), "j1", 1)
	if err := os.Symlink(linked, ckpt.StepDir(root, 1)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}

	removed, err := removeBeyond(root, 2, map[string]bool{"j1": true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dirs[1], dirs[0]}) {
		t.Errorf("removed %v, want steps 20 and 10", removed)
	}
	for _, gone := range dirs[:2] {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", gone, err)
		}
	}
	for _, kept := range []string{dirs[2], dirs[3], other, partial, linked, filepath.Join(root, "notes"), ckpt.StepDir(root, 1)} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s: %v, want it kept", kept, err)
		}
	}
	if got, err := ckpt.LatestComplete(root); err != nil || got.Dir != dirs[3] {
		t.Errorf("latest after removing: %+v, %v; want step 40", got, err)
	}
	if _, err := removeBeyond(root, 0, map[string]bool{"j1": true, "j9": true}); err == nil {
		t.Error("keep 0 accepted: it would remove the checkpoint a restart needs")
	}
}

// A job's restart chain names the job that wrote the checkpoint its first
// job restored, from the status the coordinator keeps (nothing to read);
// only a record from before that status named it leaves a manifest to
// read, which then adds its writer.
func TestChainNamesTheRestoredCheckpointsWriter(t *testing.T) {
	c := &Coordinator{}
	first := &job{id: "j2", ckpt: jobCheckpoints{restored: &api.CheckpointStatus{Step: 10, Dir: "/nonexistent/step-10", Job: "j1"}}}
	second := &job{id: "j3", restartOf: "j2"}
	c.jobs = []*job{first, second}
	ids, read := c.chainJobs(second)
	if !ids["j1"] || !ids["j2"] || !ids["j3"] || len(ids) != 3 || len(read) != 0 {
		t.Errorf("chain %v, manifests to read %v; want j1, j2, j3 and none", ids, read)
	}

	dir := writeFakeCheckpoint(t, t.TempDir(), "j0", 10)
	first.ckpt.restored = &api.CheckpointStatus{Step: 10, Dir: dir}
	if ids, read = c.chainJobs(second); len(read) != 1 || ids["j0"] {
		t.Fatalf("a restored status without its writer: chain %v, to read %v; want its directory to read", ids, read)
	}
	if ids = c.chain(second); !ids["j0"] {
		t.Errorf("chain %v, want the writer the manifest names, j0", ids)
	}
}

// TestVerifyingALargeCheckpointIsNotPartOfThePlanTimeout: a job restored
// from a checkpoint whose files take longer to hash than the planner may
// take to plan (here 600 ms against 300 ms) is planned and trained once
// they verify, not failed for a plan that "did not finish".
func TestVerifyingALargeCheckpointIsNotPartOfThePlanTimeout(t *testing.T) {
	verify := verifyDir
	verifyDir = func(dir string) (ckpt.Manifest, error) {
		time.Sleep(600 * time.Millisecond)
		return verify(dir)
	}
	t.Cleanup(func() { verifyDir = verify })
	tc := startCluster(t, func(c *Config) { c.PlanTimeout = 300 * time.Millisecond })
	dir := writeFakeCheckpoint(t, t.TempDir(), "j0", 5)
	job := ctrJob + fmt.Sprintf("[checkpoint]\nrestore = %q\n", dir)
	plan := tc.expectedPlan(job)
	for i, s := range plan.Stages {
		tc.start(newFakeNode(fmt.Sprintf("r%d", i), s.Type, s.Units, 7000+i))
	}
	tc.start(newFakeNode("ps", firstCPUType(tc.cat), 1, 7100))
	s := tc.waitJob(tc.submit(job))
	if s.State != api.JobDone || s.RestoredFrom == nil || s.RestoredFrom.Step != 5 {
		t.Fatalf("%s (%s), restored from %+v", s.State, s.Reason, s.RestoredFrom)
	}
}

// TestAbandonedCheckpointStepsAreRemoved: once a checkpoint is complete,
// the older steps that some of the job's servers wrote and others passed
// (an asked step a server heard of too late) lose the files those servers
// reported, and their directories if nothing else is in them; a reported
// name that is not a plain file name removes nothing, and a step directory
// with a manifest (another job's, sharing the directory) stays whole.
func TestAbandonedCheckpointStepsAreRemoved(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "ckpt")
	c, err := New(Config{Catalog: loadTestCatalog(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	j := &job{id: "j1", state: api.JobRunning, file: &config.Job{Steps: 100}}
	j.file.Checkpoint.Dir = root
	for shard := range 2 {
		j.tasks = append(j.tasks, &taskRun{job: j, task: api.Task{Role: api.RolePS, Shard: shard, PS: []string{"a", "b"}}})
	}
	write := func(step int64, shard int) api.ShardCheckpoint {
		dir := ckpt.StepDir(root, step)
		path := filepath.Join(dir, ps.FileName(shard, 2))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, fmt.Appendf(nil, "shard %d step %d", shard, step), 0o644); err != nil {
			t.Fatal(err)
		}
		e, err := ckpt.DigestFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return api.ShardCheckpoint{Step: step, File: e}
	}
	completed := write(12, 1) // another job's complete checkpoint of the same step, in the same directory
	if err := ps.WriteManifest(ckpt.StepDir(root, 12), "j9", 12, 1, []ckpt.FileEntry{completed.File}); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(base, "outside")
	if err := os.WriteFile(outside, []byte("not the job's"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostile := api.ShardCheckpoint{Step: 11, File: ckpt.FileEntry{Name: "../../outside"}}
	notes := filepath.Join(ckpt.StepDir(root, 15), "notes.txt")
	shard0 := []api.ShardCheckpoint{write(10, 0), hostile, {Step: 12, File: completed.File}, write(20, 0)}
	shard1 := []api.ShardCheckpoint{write(15, 1), write(20, 1)}
	if err := os.WriteFile(notes, []byte("a person's"), 0o644); err != nil {
		t.Fatal(err)
	}

	c.mu.Lock()
	c.recordCheckpoints(j.tasks[0], shard0)
	c.recordCheckpoints(j.tasks[1], shard1)
	c.mu.Unlock()
	select {
	case w := <-c.manifests:
		c.finishManifest(w)
	default:
		t.Fatal("step 20 complete on both shards, and no manifest queued")
	}

	if steps := completeSteps(t, root); !slices.Equal(steps, []int64{12, 20}) {
		t.Errorf("complete steps %v, want [12 20]: the other job's 12 kept", steps)
	}
	if _, err := os.Stat(ckpt.StepDir(root, 10)); !os.IsNotExist(err) {
		t.Errorf("step 10, abandoned, still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(ckpt.StepDir(root, 15), ps.FileName(1, 2))); !os.IsNotExist(err) {
		t.Errorf("step 15's shard file still there (%v)", err)
	}
	for _, kept := range []string{notes, outside, filepath.Join(ckpt.StepDir(root, 12), completed.File.Name)} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s: %v, want it kept", kept, err)
		}
	}
	if j.ckpt.latest == nil || j.ckpt.latest.Step != 20 || len(j.ckpt.files) != 0 {
		t.Errorf("latest %+v, steps still awaited %v", j.ckpt.latest, j.ckpt.files)
	}
}

// checkpoint.restore names a step directory (its manifest says the step)
// or a root (its newest complete step directory is taken, one without a
// manifest skipped); a root with none, a missing path and a corrupt
// manifest are refused, each saying why.
func TestResolveRestoreTakesAStepOrTheNewestUnderARoot(t *testing.T) {
	root := t.TempDir()
	writeFakeCheckpoint(t, root, "j1", 40)
	mid := writeFakeCheckpoint(t, root, "j1", 60)
	if err := os.MkdirAll(ckpt.StepDir(root, 80), 0o755); err != nil { // unfinished: no manifest
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		step int64
		dir  string
	}{{mid, 60, mid}, {root, 60, mid}} {
		got, err := resolveRestore(tc.path)
		if err != nil || got.Step != tc.step || got.Dir != tc.dir || got.Job != "j1" {
			t.Errorf("resolveRestore(%s) = %+v, %v; want step %d in %s of j1", tc.path, got, err, tc.step, tc.dir)
		}
	}
	if _, err := resolveRestore(t.TempDir()); !errors.Is(err, ckpt.ErrNoCheckpoint) {
		t.Errorf("an empty root: %v, want ErrNoCheckpoint", err)
	}
	if _, err := resolveRestore(filepath.Join(root, "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("a missing path: %v, want an error naming it", err)
	}
	bad := writeFakeCheckpoint(t, t.TempDir(), "j2", 10)
	if err := os.WriteFile(filepath.Join(bad, ckpt.ManifestName), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveRestore(bad); err == nil || errors.Is(err, ckpt.ErrNoCheckpoint) || !strings.Contains(err.Error(), ckpt.ManifestName+": not a valid manifest") {
		t.Errorf("a corrupt manifest: %v, want an error naming the file", err)
	}
}
