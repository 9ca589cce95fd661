package ps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/heterps/heterps/daemon/ckpt"
)

// Metadata keys of a shard file, beside ckpt's model, step and format.
const (
	keyJob    = "heterps.ps.job"
	keyShard  = "heterps.ps.shard"
	keyShards = "heterps.ps.shards"
	keyMode   = "heterps.ps.mode"
	// keyParam + name holds a paramMeta in JSON.
	keyParam = "heterps.ps.param."
)

// idsSuffix names a table's ids tensor: "<table>.ids".
const idsSuffix = ".ids"

// paramMeta describes one table or block in a shard file.
type paramMeta struct {
	Kind      string `json:"kind"` // "table" or "block"
	Dim       int    `json:"dim"`  // table row width, or block length
	Rows      int    `json:"rows,omitempty"`
	Stage     int    `json:"stage"`
	Optimizer string `json:"optimizer"`
	States    int    `json:"state_buffers"`
	Version   int64  `json:"version"`
}

// FileName is the name of shard's file, of shards, in a checkpoint directory.
func FileName(shard, shards int) string {
	return fmt.Sprintf("shard-%05d-of-%05d.safetensors", shard, shards)
}

// FileName is the name of the shard's checkpoint file.
func (s *Shard) FileName() string { return FileName(s.cfg.Shard, s.cfg.Shards) }

// stateName names a parameter's value (i < 0) or its i-th optimiser state,
// as daemon/nn's checkpoints do.
func stateName(param string, i int) string {
	if i < 0 {
		return param
	}
	return fmt.Sprintf("%s.opt%d", param, i)
}

// Checkpoint writes the shard's state after step into dir, which must
// exist, as FileName(shard, shards), and returns the file's manifest entry.
// In BSP it first fences the shard at step (it fails with ErrStepPassed if a
// table or block is already past it), waits until every table and block
// has applied step, and copies the state (snapshot) while it holds later
// steps; then it lifts the fence and writes the copy, so that training
// goes on while the file is written (CheckFreq's snapshot-then-persist).
// In ASP it waits until every replica has had its pushes of every step up
// to step accepted and copies the state as it is then, later pushes of
// faster replicas included (a restart from it trains those again). Every
// table and block is read-locked while it is copied: pushes and row
// creation wait for the copy, not for the disk.
func (s *Shard) Checkpoint(ctx context.Context, dir string, step int64) (ckpt.FileEntry, error) {
	snaps, err := SnapshotShards(ctx, step, []*Shard{s})
	if err != nil {
		return ckpt.FileEntry{}, err
	}
	return s.write(dir, snaps[0], nil)
}

// hold fences the shard at step for one checkpoint.
func (s *Shard) hold(step int64) error {
	if step < 0 {
		return fmt.Errorf("ps shard %d: checkpoint at step %d: %w", s.cfg.Shard, step, ErrArg)
	}
	if !s.ckptMu.TryLock() {
		return fmt.Errorf("ps shard %d: checkpoint at step %d: %w", s.cfg.Shard, step, ErrCheckpointBusy)
	}
	if s.cfg.Mode == ASP {
		return nil
	}
	s.fence.Store(step)
	for _, st := range s.all() {
		st.mu.RLock()
		v := st.version
		st.mu.RUnlock()
		if v > step {
			err := fmt.Errorf("ps shard %d: checkpoint at step %d: a table or block is at step %d: %w",
				s.cfg.Shard, step, v, ErrStepPassed)
			return errors.Join(err, s.release())
		}
	}
	return nil
}

// release lifts the fence and applies the steps it held.
func (s *Shard) release() error {
	defer s.ckptMu.Unlock()
	if s.cfg.Mode == ASP {
		return nil
	}
	s.fence.Store(-1)
	return s.releaseHeld()
}

// awaitStep waits until the shard holds everything of step (Reached): in
// BSP until every table and block has applied it, in ASP until every
// member of their stages has had its pushes through it accepted. However
// long training takes to get there, it waits while updates come; it gives
// up when ctx ends or when none has come for WaitTimeout (ErrStalled).
func (s *Shard) awaitStep(ctx context.Context, step int64) error {
	stall := s.cfg.WaitTimeout
	for _, p := range s.params() {
		var err error
		if s.cfg.Mode == ASP {
			err = p.waitPushed(ctx, s.closed, stall, s.membersAt(p.stage, step), s.first, step)
		} else {
			err = p.waitVersion(ctx, s.closed, stall, step)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Snapshot is a copy of a shard's state at one step, ready to write
// (WriteSnapshots), or, taken in place, the shard itself held at that step
// until it is written: then its tensors stream from the shard's slabs, and
// the shard's read locks and fence hold training until Release.
type Snapshot struct {
	meta    map[string]string
	tensors []ckpt.Tensor
	unlock  func() error // in place: lets the shard go, once
}

// InPlace reports whether the snapshot holds its shard instead of a copy.
func (s Snapshot) InPlace() bool { return s.unlock != nil }

// Release lets go of the shard a snapshot taken in place holds (its read
// locks and checkpoint fence): WriteSnapshots does once it has written it;
// call it for one that will not be written. A copy holds nothing.
func (s Snapshot) Release() error {
	if s.unlock == nil {
		return nil
	}
	return s.unlock()
}

// snapshot copies the shard's state at step (reached: awaitStep) under
// read locks on every table and block, or, inPlace, takes those locks and
// keeps them, and the fence, until the snapshot is released.
func (s *Shard) snapshot(step int64, inPlace bool) (Snapshot, error) {
	all := s.all()
	for _, st := range all {
		st.mu.RLock()
	}
	unlock := func() {
		for _, st := range all {
			st.mu.RUnlock()
		}
	}
	meta, err := s.metadata(step)
	if err != nil {
		unlock()
		return Snapshot{}, fmt.Errorf("ps shard %d: checkpoint: %w", s.cfg.Shard, err)
	}
	snap := Snapshot{meta: meta}
	for _, t := range sortedValues(s.tables) {
		snap.tensors = append(snap.tensors, t.tensors(inPlace)...)
	}
	for _, b := range sortedValues(s.blocks) {
		snap.tensors = append(snap.tensors, b.tensors(inPlace)...)
	}
	if !inPlace {
		unlock()
		return snap, nil
	}
	var once sync.Once
	var releaseErr error
	snap.unlock = func() error {
		once.Do(func() {
			unlock()
			releaseErr = s.release()
		})
		return releaseErr
	}
	return snap, nil
}

// CopyBytes is about what a copy of the shard's state for a checkpoint
// takes in memory.
func (s *Shard) CopyBytes() int64 {
	var n int64
	for _, t := range s.tables {
		t.mu.RLock()
		n += int64(len(t.ids)) * (8 + floatBytes(t.spec.Dim, t.nstate)) // an int64 id and its row
		t.mu.RUnlock()
	}
	for _, b := range s.blocks {
		n += floatBytes(len(b.value), len(b.state))
	}
	return n
}

// write writes a snapshot as the shard's file in dir.
func (s *Shard) write(dir string, snap Snapshot, written *atomic.Int64) (ckpt.FileEntry, error) {
	path := filepath.Join(dir, s.FileName())
	entry, err := ckpt.WriteFileCounted(path, snap.meta, snap.tensors, written)
	if err != nil {
		return entry, fmt.Errorf("ps shard %d: checkpoint: %w", s.cfg.Shard, err)
	}
	return entry, nil
}

// metadata describes the shard and every table and block. Under the read
// locks.
func (s *Shard) metadata(step int64) (map[string]string, error) {
	meta := ckpt.NewMetadata(s.cfg.Model, step)
	meta[keyJob] = s.cfg.Job
	meta[keyShard] = fmt.Sprint(s.cfg.Shard)
	meta[keyShards] = fmt.Sprint(s.cfg.Shards)
	meta[keyMode] = s.cfg.Mode.String()
	describe := func(name string, m paramMeta) error {
		js, err := json.Marshal(m)
		meta[keyParam+name] = string(js)
		return err
	}
	for _, t := range s.tables {
		err := describe(t.spec.Name, paramMeta{Kind: "table", Dim: t.spec.Dim, Rows: len(t.ids), Stage: t.spec.Stage,
			Optimizer: optimName(t.spec.Optim.Hyper.Kind), States: t.nstate, Version: t.version})
		if err != nil {
			return nil, err
		}
	}
	for _, b := range s.blocks {
		err := describe(b.spec.Name, paramMeta{Kind: "block", Dim: len(b.value), Stage: b.spec.Stage,
			Optimizer: optimName(b.spec.Optim.Hyper.Kind), States: len(b.state), Version: b.version})
		if err != nil {
			return nil, err
		}
	}
	return meta, nil
}

// tensors copies the table's ids, values and state out of its slabs, or,
// inPlace, streams them from the slabs when written (the caller holds the
// read lock until then). Under its read lock.
func (t *table) tensors(inPlace bool) []ckpt.Tensor {
	n, d := int64(len(t.ids)), int64(t.spec.Dim)
	if inPlace {
		ids, slabs := t.ids[:n:n], slices.Clone(t.slabs)
		out := []ckpt.Tensor{ckpt.Int64(t.spec.Name+idsSuffix, []int64{n}, ids)}
		out = append(out, streamRows(t.spec.Name, n, d, slabs, func(sl *slab) []float32 { return sl.value }))
		for i := range t.nstate {
			out = append(out, streamRows(stateName(t.spec.Name, i), n, d, slabs, func(sl *slab) []float32 { return sl.state[i] }))
		}
		return out
	}
	out := []ckpt.Tensor{
		ckpt.Int64(t.spec.Name+idsSuffix, []int64{n}, slices.Clone(t.ids)),
		ckpt.Float32(t.spec.Name, []int64{n, d}, t.copyRows(func(sl *slab) []float32 { return sl.value })),
	}
	for i := range t.nstate {
		out = append(out, ckpt.Float32(stateName(t.spec.Name, i), []int64{n, d},
			t.copyRows(func(sl *slab) []float32 { return sl.state[i] })))
	}
	return out
}

// streamRows is a tensor of the first n rows of d floats of the chosen
// buffer of slabs, written slab by slab straight from them.
func streamRows(name string, n, d int64, slabs []*slab, buf func(*slab) []float32) ckpt.Tensor {
	return ckpt.Stream(name, ckpt.F32, []int64{n, d}, func(w io.Writer) error {
		left := n * d
		for _, sl := range slabs {
			b := buf(sl)
			k := min(left, int64(len(b)))
			if err := ckpt.WriteFloat32(w, b[:k]); err != nil {
				return err
			}
			left -= k
		}
		return nil
	})
}

// copyRows copies the first len(ids) rows of the chosen buffer, slab by
// slab, into one slice.
func (t *table) copyRows(buf func(*slab) []float32) []float32 {
	out := make([]float32, 0, len(t.ids)*t.spec.Dim)
	left := len(t.ids) * t.spec.Dim
	for _, sl := range t.slabs {
		b := buf(sl)
		n := min(left, len(b))
		out = append(out, b[:n]...)
		left -= n
	}
	return out
}

// tensors copies the block's value and state, or, inPlace, refers to them
// (the caller holds the read lock until they are written). Under its read
// lock.
func (b *block) tensors(inPlace bool) []ckpt.Tensor {
	keep := slices.Clone[[]float32]
	if inPlace {
		keep = func(v []float32) []float32 { return v }
	}
	shape := []int64{int64(len(b.value))}
	out := []ckpt.Tensor{ckpt.Float32(b.spec.Name, shape, keep(b.value))}
	for i, st := range b.state {
		out = append(out, ckpt.Float32(stateName(b.spec.Name, i), shape, keep(st)))
	}
	return out
}

// CheckpointAll writes a consistent checkpoint of every shard of a job, in
// index order, at step: WriteShards into ckpt.StepDir(root, step), then the
// manifest last. It returns the step directory.
func CheckpointAll(ctx context.Context, root string, step int64, shards []*Shard) (string, error) {
	if err := checkGroup(shards); err != nil {
		return "", err
	}
	dir := ckpt.StepDir(root, step)
	files, err := WriteShards(ctx, dir, step, shards)
	if err != nil {
		return "", err
	}
	cfg := shards[0].cfg
	if err := WriteManifest(dir, cfg.Job, step, cfg.Shards, files); err != nil {
		return "", err
	}
	return dir, nil
}

// WriteShards writes the files of some shards of a job at step into dir
// (created if missing) and returns their manifest entries, in the order
// given: SnapshotShards, then WriteSnapshots. Shards on other nodes write
// theirs the same way; whoever holds every entry writes the manifest
// (WriteManifest).
func WriteShards(ctx context.Context, dir string, step int64, shards []*Shard) ([]ckpt.FileEntry, error) {
	snaps, err := SnapshotShards(ctx, step, shards)
	if err != nil {
		return nil, err
	}
	return WriteSnapshots(dir, shards, snaps, nil)
}

// SnapshotShards copies some shards of a job at step. It fences all of
// them first, so that none passes the step while another is copied, and
// lifts each fence once its shard is copied: training goes on while the
// copies are written. It fails with ErrStepPassed if a shard is already
// past step.
func SnapshotShards(ctx context.Context, step int64, shards []*Shard) ([]Snapshot, error) {
	return SnapshotShardsWithin(ctx, step, shards, nil)
}

// SnapshotShardsWithin is SnapshotShards where room, if not nil, says,
// once the shards have reached step, whether copies of need bytes in all
// fit in memory. When they do not, each shard is taken in place instead
// (Snapshot.InPlace): held at step, fenced and read-locked, until
// WriteSnapshots has written it — training waits for the disk, but the
// shards' state is not doubled in memory. An error from room gives the
// checkpoint up: the shards are released and the error returned.
func SnapshotShardsWithin(ctx context.Context, step int64, shards []*Shard, room func(need int64) (bool, error)) ([]Snapshot, error) {
	var held []*Shard
	defer func() {
		// Only on failure: the error already returned is the one to report.
		for _, s := range held {
			_ = s.release()
		}
	}()
	for _, s := range shards {
		if err := s.hold(step); err != nil {
			return nil, err
		}
		held = append(held, s)
	}
	for _, s := range shards {
		if err := s.awaitStep(ctx, step); err != nil {
			return nil, fmt.Errorf("ps shard %d: checkpoint at step %d: %w", s.cfg.Shard, step, err)
		}
	}
	inPlace := false
	if room != nil {
		var need int64
		for _, s := range shards {
			need += s.CopyBytes()
		}
		fits, err := room(need)
		if err != nil {
			return nil, err
		}
		inPlace = !fits
	}
	snaps := make([]Snapshot, 0, len(shards))
	for _, s := range shards {
		snap, err := s.snapshot(step, inPlace)
		if err != nil {
			releaseAll(snaps)
			return nil, err
		}
		snaps = append(snaps, snap)
		held = held[1:] // released now, or by its snapshot
		if !inPlace {
			if err := s.release(); err != nil {
				return nil, err
			}
		}
	}
	return snaps, nil
}

// releaseAll releases snaps (Snapshot.Release) and returns the first error.
func releaseAll(snaps []Snapshot) error {
	var first error
	for _, s := range snaps {
		if err := s.Release(); first == nil {
			first = err
		}
	}
	return first
}

// WriteSnapshots writes the shards' copies into dir (created if missing)
// and returns their manifest entries, in order; it then releases the
// snapshots taken in place, written or not. It adds to written, if not
// nil, the bytes written as they go (ckpt.WriteFileCounted).
func WriteSnapshots(dir string, shards []*Shard, snaps []Snapshot, written *atomic.Int64) ([]ckpt.FileEntry, error) {
	defer releaseAll(snaps) // those taken in place hold their shards until written
	if len(snaps) != len(shards) {
		return nil, fmt.Errorf("ps checkpoint: %d snapshots of %d shards: %w", len(snaps), len(shards), ErrArg)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ps checkpoint: %w", err)
	}
	files := make([]ckpt.FileEntry, len(shards))
	for i, s := range shards {
		entry, err := s.write(dir, snaps[i], written)
		if err != nil {
			return nil, err
		}
		files[i] = entry
	}
	return files, nil
}

// WriteManifest marks a step directory complete once every shard's file is
// in it: the coordinator's last act when shards run in several processes.
func WriteManifest(dir, job string, step int64, shards int, files []ckpt.FileEntry) error {
	if len(files) != shards {
		return fmt.Errorf("ps checkpoint %s: %d files for %d shards: %w", dir, len(files), shards, ErrArg)
	}
	return ckpt.WriteManifest(dir, ckpt.Manifest{JobID: job, Step: step, Shards: shards, Files: files})
}

// checkGroup checks shards are every shard of one job, in index order.
func checkGroup(shards []*Shard) error {
	if len(shards) == 0 {
		return fmt.Errorf("ps checkpoint: no shards: %w", ErrArg)
	}
	job, n := shards[0].cfg.Job, shards[0].cfg.Shards
	if len(shards) != n {
		return fmt.Errorf("ps checkpoint: job %s has %d shards, %d given: %w", job, n, len(shards), ErrArg)
	}
	for i, s := range shards {
		if s.cfg.Job != job || s.cfg.Shards != n || s.cfg.Shard != i {
			return fmt.Errorf("ps checkpoint: shards[%d] is shard %d of %d of job %s, want shard %d of %d of job %s: %w",
				i, s.cfg.Shard, s.cfg.Shards, s.cfg.Job, i, n, job, ErrArg)
		}
	}
	return nil
}
