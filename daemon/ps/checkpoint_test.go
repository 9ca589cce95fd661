package ps

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/ckpt"
)

// job is an in-process job: shards and the ids each replica touches.
type job struct {
	cfgs   []Config
	shards []*Shard
}

func newJob(t *testing.T, mode Mode, nshards, replicas int) *job {
	t.Helper()
	j := &job{}
	for i := range nshards {
		cfg := testConfig(t, mode, i, nshards, replicas, adam)
		s, err := NewShard(cfg)
		if err != nil {
			t.Fatal(err)
		}
		j.cfgs = append(j.cfgs, cfg)
		j.shards = append(j.shards, s)
	}
	return j
}

// step pushes one step from every replica to every table and block, the
// gradients drawn from seed so that two jobs can be fed the same step.
func (j *job) step(t *testing.T, step int64, replicas int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(step)))
	for r := range replicas {
		pid := id(r, step)
		pid.Job = j.shards[0].cfg.Job
		for i, s := range j.shards {
			ids := idsOn(i, len(j.shards), 12)
			rng.Shuffle(len(ids), func(a, b int) { ids[a], ids[b] = ids[b], ids[a] })
			ids = ids[:3+rng.IntN(9)]
			mustPushRows(t, s, pid, float64(1+r), ids, randFloats(rng, len(ids)*testDim))
		}
		mustPushBlock(t, j.shards[0], pid, float64(1+r), randFloats(rng, testLen))
	}
}

// state pulls every row id < 40 of every shard and the block.
func (j *job) state(t *testing.T) [][]float32 {
	t.Helper()
	var out [][]float32
	for i, s := range j.shards {
		out = append(out, pullRows(t, s, idsOn(i, len(j.shards), 15), 0))
	}
	return append(out, pullBlock(t, j.shards[0], 0))
}

func TestCheckpointRoundTrip(t *testing.T) {
	for _, mode := range []Mode{BSP, ASP} {
		t.Run(mode.String(), func(t *testing.T) {
			const nshards, replicas = 2, 2
			orig := newJob(t, mode, nshards, replicas)
			for step := int64(1); step <= 3; step++ {
				orig.step(t, step, replicas, 1)
			}
			ckStep := int64(3)
			root := t.TempDir()
			dir, err := CheckpointAll(context.Background(), root, ckStep, orig.shards)
			if err != nil {
				t.Fatal(err)
			}
			latest, err := ckpt.LatestComplete(root)
			if err != nil || latest.Dir != dir || latest.Manifest.JobID != "j" || latest.Manifest.Shards != nshards {
				t.Fatalf("latest complete checkpoint %+v, %v; want %s of job j", latest, err, dir)
			}
			checkShardFile(t, dir, orig.shards[0])

			restored, err := RestoreAll(orig.cfgs, dir)
			if err != nil {
				t.Fatal(err)
			}
			back := &job{cfgs: orig.cfgs, shards: restored}
			for i, s := range orig.shards {
				if restored[i].Rows() != s.Rows() {
					t.Errorf("shard %d: %d rows restored, %d saved", i, restored[i].Rows(), s.Rows())
				}
				for _, name := range []string{testTable, testBlock} {
					v1, err1 := s.Version(name)
					v2, err2 := restored[i].Version(name)
					if v1 != v2 || (err1 == nil) != (err2 == nil) {
						t.Errorf("shard %d %s: version %d restored, %d saved", i, name, v2, v1)
					}
				}
			}
			assertSameState(t, "restored", back.state(t), orig.state(t))
			// The next updates use the restored optimiser state and step.
			orig.step(t, 4, replicas, 2)
			back.step(t, 4, replicas, 2)
			assertSameState(t, "after the next step", back.state(t), orig.state(t))
		})
	}
}

func checkShardFile(t *testing.T, dir string, s *Shard) {
	t.Helper()
	f, err := ckpt.Open(filepath.Join(dir, FileName(0, 2)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := int64(s.Rows())
	want := map[string][]int64{
		testTable + ".ids": {n}, testTable: {n, testDim}, testTable + ".opt0": {n, testDim},
		testTable + ".opt1": {n, testDim}, testBlock: {testLen}, testBlock + ".opt0": {testLen}, testBlock + ".opt1": {testLen},
	}
	for _, ti := range f.Tensors() {
		if shape, ok := want[ti.Name]; !ok || !slices.Equal(shape, ti.Shape) {
			t.Errorf("tensor %s %v in the shard file; want shape %v", ti.Name, ti.Shape, shape)
		}
		delete(want, ti.Name)
	}
	if len(want) > 0 {
		t.Errorf("shard file lacks %v", want)
	}
}

func assertSameState(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	for i := range want {
		if !bitsEqual(got[i], want[i]) {
			t.Fatalf("%s: part %d differs:\n got %v\nwant %v", what, i, got[i], want[i])
		}
	}
}

func TestRestoreRefuses(t *testing.T) {
	j := newJob(t, BSP, 2, 1)
	j.step(t, 1, 1, 1)
	root := t.TempDir()
	dir, err := CheckpointAll(context.Background(), root, 1, j.shards)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, FileName(1, 2))
	refuse := func(what string, cfg Config, dir string, wantIn ...string) {
		t.Helper()
		_, err := Restore(cfg, dir)
		if err == nil {
			t.Fatalf("%s: restored", what)
		}
		for _, w := range wantIn {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", what, err, w)
			}
		}
	}

	other := j.cfgs[1]
	other.Job = "k"
	refuse("another job", other, dir, `job "j", not "k"`)
	three := testConfig(t, BSP, 1, 3, 1, adam)
	refuse("another shard count", three, dir, "2 shards", "now has 3")
	wide := j.cfgs[1]
	wide.Tables = slices.Clone(wide.Tables)
	wide.Tables[0].Dim = testDim + 1
	refuse("another row width", wide, dir, testTable, "dim")
	sgd := j.cfgs[1]
	sgd.Tables = []TableSpec{{Name: testTable, Dim: testDim, Optim: sgdMom, InitLimit: 0.1}}
	refuse("another optimiser", sgd, dir, testTable, "sgd")

	// An unfinished checkpoint: shard files without a manifest.
	unfinished := ckpt.StepDir(root, 2)
	if err := os.MkdirAll(unfinished, 0o755); err != nil {
		t.Fatal(err)
	}
	j.step(t, 2, 1, 1)
	if _, err := j.shards[1].Checkpoint(context.Background(), unfinished, 2); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(j.cfgs[1], unfinished)
	if !errors.Is(err, ckpt.ErrNoManifest) || !strings.Contains(err.Error(), unfinished) {
		t.Errorf("restore without a manifest: %v, want ErrNoManifest naming %s", err, unfinished)
	}

	// One flipped byte in shard 1's data.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-3] ^= 0x40
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	refuse("a corrupt shard file", j.cfgs[1], dir, file, "corrupt")
	if _, err := Restore(j.cfgs[0], dir); err != nil {
		t.Errorf("shard 0, whose file is intact: %v", err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	refuse("a missing shard file", j.cfgs[1], dir, file)
}

// TestCheckpointFenceHoldsLaterSteps: while a checkpoint of step 2 holds
// the shard, step 2 still applies, step 3 is accepted but held, and is
// applied when the fence lifts.
func TestCheckpointFenceHoldsLaterSteps(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	mustPushRows(t, s, id(0, 1), 1, nil, nil)
	mustPushBlock(t, s, id(0, 1), 1, make([]float32, testLen))
	if err := s.hold(2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(context.Background(), t.TempDir(), 2); !errors.Is(err, ErrCheckpointBusy) {
		t.Errorf("second checkpoint while one runs: %v, want ErrCheckpointBusy", err)
	}
	g := randFloats(rand.New(rand.NewPCG(1, 1)), testLen)
	if ack := mustPushBlock(t, s, id(0, 2), 1, g); !ack.Applied || ack.Version != 2 {
		t.Errorf("step 2 under a fence at 2: %+v, want applied", ack)
	}
	at2 := pullBlock(t, s, 2)
	for step := int64(2); step <= 3; step++ {
		mustPushRows(t, s, id(0, step), 1, nil, nil) // the table keeps up; the checks are on the block
	}
	if ack := mustPushBlock(t, s, id(0, 3), 1, g); ack.Applied || ack.Version != 2 {
		t.Errorf("step 3 under a fence at 2: %+v, want held at version 2", ack)
	}
	if ack := mustPushBlock(t, s, id(0, 3), 1, g); !ack.Duplicate {
		t.Errorf("retry of the held step 3: %+v, want a duplicate", ack)
	}
	if !bitsEqual(pullBlock(t, s, 2), at2) {
		t.Error("the block changed while step 3 was held")
	}
	if err := s.release(); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Version(testBlock); v != 3 {
		t.Errorf("version %d after the fence lifted, want 3", v)
	}
	if _, err := s.Checkpoint(context.Background(), t.TempDir(), 2); !errors.Is(err, ErrStepPassed) {
		t.Errorf("checkpoint of step 2 at version 3: %v, want ErrStepPassed", err)
	}
	if _, err := s.Checkpoint(context.Background(), t.TempDir(), 3); err != nil {
		t.Errorf("checkpoint after a refused one: %v", err)
	}
}

// TestCheckpointWaitsForItsStep: a checkpoint asked for a step ahead
// waits for it while the replicas push, and captures exactly that step.
func TestCheckpointWaitsForItsStep(t *testing.T) {
	j := newJob(t, BSP, 2, 1)
	root := t.TempDir()
	type result struct {
		dir string
		err error
	}
	done := make(chan result)
	go func() {
		dir, err := CheckpointAll(context.Background(), root, 2, j.shards)
		done <- result{dir, err}
	}()
	j.step(t, 1, 1, 1)
	waitFenced(t, j.shards, 2)
	j.step(t, 2, 1, 1)
	at2 := j.state(t)
	j.step(t, 3, 1, 1) // held until the checkpoint is written, or applied after
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	restored, err := RestoreAll(j.cfgs, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	assertSameState(t, "checkpoint of step 2", (&job{shards: restored}).state(t), at2)
	for i, s := range j.shards {
		if _, _, err := s.PullBlock(context.Background(), testTable, 0); i > 0 && err == nil {
			t.Errorf("shard %d serves a block it does not hold", i)
		}
		if v, _ := s.Version(testTable); v != 3 {
			t.Errorf("shard %d at version %d after the checkpoint, want 3", i, v)
		}
	}
}

func TestFailedCheckpointWritesNoManifestAndReleases(t *testing.T) {
	j := newJob(t, BSP, 2, 1)
	root := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := CheckpointAll(ctx, root, 5, j.shards); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("checkpoint of a step never reached: %v", err)
	}
	if _, err := ckpt.ReadManifest(ckpt.StepDir(root, 5)); !errors.Is(err, ckpt.ErrNoManifest) {
		t.Errorf("manifest after a failed checkpoint: %v", err)
	}
	if _, err := ckpt.LatestComplete(root); !errors.Is(err, ckpt.ErrNoCheckpoint) {
		t.Errorf("a failed checkpoint counts as complete: %v", err)
	}
	for step := int64(1); step <= 6; step++ {
		j.step(t, step, 1, 1)
	}
	if v, _ := j.shards[1].Version(testTable); v != 6 {
		t.Errorf("version %d after 6 steps: the failed checkpoint's fence still holds", v)
	}
	if _, err := CheckpointAll(context.Background(), root, 6, j.shards); err != nil {
		t.Errorf("checkpoint after a failed one: %v", err)
	}
}

// waitFenced waits until a checkpoint has fenced every shard at step.
func waitFenced(t *testing.T, shards []*Shard, step int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range shards {
		for s.fence.Load() != step {
			if time.Now().After(deadline) {
				t.Fatalf("shard %d not fenced at step %d", s.cfg.Shard, step)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestShardsCheckpointedApartRestoreAsAnotherJob writes each shard's file
// separately, as two nodes would, and the manifest from their entries, as
// the coordinator does; a new job restores it with RestoreAs (Restore
// refuses: another job) and continues exactly as the old one.
func TestShardsCheckpointedApartRestoreAsAnotherJob(t *testing.T) {
	const nshards, replicas = 2, 2
	orig := newJob(t, BSP, nshards, replicas)
	for step := int64(1); step <= 2; step++ {
		orig.step(t, step, replicas, 1)
	}
	dir := ckpt.StepDir(t.TempDir(), 2)
	var files []ckpt.FileEntry
	for _, s := range orig.shards { // one "node" per shard
		entry, err := WriteShards(context.Background(), dir, 2, []*Shard{s})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, entry...)
	}
	if _, err := ckpt.ReadManifest(dir); !errors.Is(err, ckpt.ErrNoManifest) {
		t.Fatalf("manifest before WriteManifest: %v", err)
	}
	if err := WriteManifest(dir, "j", 2, nshards, files); err != nil {
		t.Fatal(err)
	}

	next := &job{}
	for _, cfg := range orig.cfgs {
		cfg.Job = "k"
		if _, err := Restore(cfg, dir); err == nil || !strings.Contains(err.Error(), `job "j", not "k"`) {
			t.Fatalf("Restore into another job: %v", err)
		}
		s, err := RestoreAs(cfg, dir)
		if err != nil {
			t.Fatal(err)
		}
		next.cfgs, next.shards = append(next.cfgs, cfg), append(next.shards, s)
	}
	assertSameState(t, "restored", next.state(t), orig.state(t))
	orig.step(t, 3, replicas, 2)
	next.step(t, 3, replicas, 2) // the same gradients, pushed as job k
	assertSameState(t, "after the next step", next.state(t), orig.state(t))
}

// twoStepsIn is a one-shard BSP job of replicas replicas after two steps,
// and its state then.
func twoStepsIn(t *testing.T, replicas int) (*job, [][]float32) {
	t.Helper()
	j := newJob(t, BSP, 1, replicas)
	for step := int64(1); step <= 2; step++ {
		j.step(t, step, replicas, 1)
	}
	return j, j.state(t)
}

// TestCheckpointWritesACopy: the shard is copied while fenced and written
// after the fence is lifted, so steps applied while the file is written do
// not reach it: the file restores to the state of its step.
func TestCheckpointWritesACopy(t *testing.T) {
	const replicas = 2
	j, atStep2 := twoStepsIn(t, replicas)
	s := j.shards[0]
	if err := s.hold(2); err != nil {
		t.Fatal(err)
	}
	snap, err := s.snapshot(2, false)
	if err == nil {
		err = s.release()
	}
	if err != nil {
		t.Fatal(err)
	}
	j.step(t, 3, replicas, 2) // applied after the fence is lifted, before the write
	dir := t.TempDir()
	entry, err := s.write(dir, snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteManifest(dir, "j", 2, 1, []ckpt.FileEntry{entry}); err != nil {
		t.Fatal(err)
	}
	restored, err := RestoreAll(j.cfgs, dir)
	if err != nil {
		t.Fatal(err)
	}
	assertSameState(t, "restored from the copy", (&job{cfgs: j.cfgs, shards: restored}).state(t), atStep2)
}

// TestAnASPCheckpointWaitsForEveryReplicasPushes: an ASP checkpoint of
// step 2 is taken once every replica has had its pushes of steps 1 and 2
// accepted — whichever order they came in, and with a faster replica's
// later pushes in it too — and a shard restored from it counts from step
// 2. One that never gets them fails naming the replica behind.
func TestAnASPCheckpointWaitsForEveryReplicasPushes(t *testing.T) {
	j := newJob(t, ASP, 1, 2)
	s := j.shards[0]
	push := func(r int, step int64) {
		pid := id(r, step)
		mustPushRows(t, s, pid, 1, []int64{1, 2}, randFloats(rand.New(rand.NewPCG(uint64(r), uint64(step))), 2*testDim))
		mustPushBlock(t, s, pid, 1, randFloats(rand.New(rand.NewPCG(uint64(r), uint64(step))), testLen))
	}
	for step := int64(1); step <= 4; step++ {
		push(0, step)
	}
	push(1, 1)
	push(1, 3) // step 2 comes late, after a reconnection
	if s.Reached(2) {
		t.Fatal("step 2 reached while replica 1 has not pushed it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err := CheckpointAll(ctx, t.TempDir(), 2, j.shards)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "replica 1 has pushed through step 1") {
		t.Fatalf("ASP checkpoint before replica 1 pushed step 2: %v, want a timeout naming replica 1", err)
	}

	type result struct {
		dir string
		err error
	}
	done := make(chan result, 1)
	go func() {
		dir, err := CheckpointAll(context.Background(), t.TempDir(), 2, j.shards)
		done <- result{dir, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("checkpoint taken before replica 1 pushed step 2: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
	push(1, 2)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	now := j.state(t)
	restored, err := RestoreAll(j.cfgs, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	back := &job{cfgs: j.cfgs, shards: restored}
	assertSameState(t, "restored ASP checkpoint", back.state(t), now)
	if v, _ := restored[0].Version(testTable); v != 7 {
		t.Errorf("restored at version %d, want the 7 pushes applied", v)
	}
	if !restored[0].Reached(2) || restored[0].Reached(3) {
		t.Errorf("restored from step 2: reached 2 %v, 3 %v; want true, false", restored[0].Reached(2), restored[0].Reached(3))
	}
	s = restored[0]
	push(0, 3)
	push(1, 3)
	if !s.Reached(3) {
		t.Error("restored from step 2, both replicas pushed step 3, and step 3 is not reached")
	}
}

// TestACheckpointWaitsAsLongAsTrainingGoesOn: a checkpoint whose step
// takes longer than WaitTimeout to come is still taken, as long as steps
// keep coming; one whose shard gets no update for WaitTimeout gives up
// (ErrStalled). Before, a checkpoint interval longer than WaitTimeout (5
// minutes by default) failed the job's PS tasks.
func TestACheckpointWaitsAsLongAsTrainingGoesOn(t *testing.T) {
	for _, mode := range []Mode{BSP, ASP} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := testConfig(t, mode, 0, 1, 1, adam)
			cfg.WaitTimeout = 80 * time.Millisecond
			s, err := NewShard(cfg)
			if err != nil {
				t.Fatal(err)
			}
			j := &job{cfgs: []Config{cfg}, shards: []*Shard{s}}
			done := make(chan error, 1)
			go func() {
				_, err := CheckpointAll(context.Background(), t.TempDir(), 6, j.shards)
				done <- err
			}()
			for step := int64(1); step <= 6; step++ { // 6 x 30 ms: twice WaitTimeout
				time.Sleep(30 * time.Millisecond)
				j.step(t, step, 1, 1)
			}
			if err := <-done; err != nil {
				t.Fatalf("a checkpoint whose step came after 180 ms of steady training, WaitTimeout 80 ms: %v", err)
			}
			start := time.Now()
			_, err = CheckpointAll(context.Background(), t.TempDir(), 7, j.shards)
			if !errors.Is(err, ErrStalled) {
				t.Fatalf("a checkpoint of a step that never comes: %v, want ErrStalled", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("gave up after %s, WaitTimeout 80 ms", d)
			}
		})
	}
}

// TestACheckpointTakenInPlaceHoldsTrainingUntilWritten: when a copy of
// the shards would not fit (room says no), the checkpoint is taken in
// place: nothing is copied, the next step's pushes wait until the file is
// written, and the file holds exactly the state at its step. A snapshot
// taken in place and dropped unwritten lets the shard go when released,
// and so does one its room gives up.
func TestACheckpointTakenInPlaceHoldsTrainingUntilWritten(t *testing.T) {
	const replicas = 2
	j, atStep2 := twoStepsIn(t, replicas)
	var need int64
	snaps, err := SnapshotShardsWithin(context.Background(), 2, j.shards, func(n int64) (bool, error) { need = n; return false, nil })
	if err != nil {
		t.Fatal(err)
	}
	if !snaps[0].InPlace() || need < int64(j.shards[0].Rows())*(8+testDim*4*3) {
		t.Fatalf("in place %v, asked room for %d bytes for %d rows", snaps[0].InPlace(), need, j.shards[0].Rows())
	}
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		j.step(t, 3, replicas, 2)
	}()
	select {
	case <-stepped:
		t.Fatal("step 3 was pushed while the shard was held for its checkpoint")
	case <-time.After(50 * time.Millisecond):
	}
	dir := t.TempDir()
	files, err := WriteSnapshots(dir, j.shards, snaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-stepped
	if v, _ := j.shards[0].Version(testTable); v != 3 {
		t.Errorf("version %d after the checkpoint was written, want 3", v)
	}
	if err := WriteManifest(dir, "j", 2, 1, files); err != nil {
		t.Fatal(err)
	}
	restored, err := RestoreAll(j.cfgs, dir)
	if err != nil {
		t.Fatal(err)
	}
	assertSameState(t, "checkpoint written in place", (&job{shards: restored}).state(t), atStep2)

	snaps, err = SnapshotShardsWithin(context.Background(), 3, j.shards, func(int64) (bool, error) { return false, nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := releaseAll(snaps); err != nil {
		t.Fatal(err)
	}
	j.step(t, 4, replicas, 3)
	noRoom := errors.New("no room")
	if _, err := SnapshotShardsWithin(context.Background(), 4, j.shards, func(int64) (bool, error) { return false, noRoom }); !errors.Is(err, noRoom) {
		t.Errorf("a checkpoint its room gives up: %v", err)
	}
	if _, err := CheckpointAll(context.Background(), t.TempDir(), 4, j.shards); err != nil {
		t.Errorf("a checkpoint after one taken in place and released unwritten, and one given up: %v", err)
	}
}
