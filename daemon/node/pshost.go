package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/retry"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/native"
)

// psHost serves the parameter-server shards of every job with shards on
// this node from one listener. A ps.Service serves a fixed set of shards,
// so each job gets its own, and connections are routed to it by the
// client's node id, which names the job (psClientID). A connection that
// arrives before its job's shards are up waits for them.
type psHost struct {
	ln      *wire.Listener
	timeout time.Duration // longest wait for a job's shards
	log     *slog.Logger
	wg      sync.WaitGroup // connection handlers

	mu      sync.Mutex
	jobs    map[string]*psJob
	changed chan struct{} // closed and replaced when jobs changes
}

type psJob struct {
	svc    *ps.Service
	ctx    context.Context // ends when the job leaves this node
	shards []*ps.Shard     // this node's shards of the job
}

// local returns shard index of job if this node hosts it, for the job's
// stage workers on this node to call directly.
func (h *psHost) local(job string, index int) *ps.Shard {
	h.mu.Lock()
	j := h.jobs[job]
	h.mu.Unlock()
	if j == nil {
		return nil
	}
	for _, s := range j.shards {
		if s.Index() == index {
			return s
		}
	}
	return nil
}

func newPSHost(ln *wire.Listener, timeout time.Duration, log *slog.Logger) *psHost {
	return &psHost{ln: ln, timeout: timeout, log: log, jobs: map[string]*psJob{}, changed: make(chan struct{})}
}

// psClientID is the node id a stage's PS client dials with: it names the
// job, which is how psHost routes the connection.
func psClientID(t api.Task) string { return "psc/" + t.JobID + "/" + t.TaskID }

func jobOfClient(id string) string {
	parts := strings.SplitN(id, "/", 3)
	if len(parts) != 3 || parts[0] != "psc" {
		return ""
	}
	return parts[1]
}

// serve accepts connections until ctx ends, each handled on its own
// goroutine; close waits for them.
func (h *psHost) serve(ctx context.Context) {
	for {
		c, err := h.ln.Accept(ctx)
		if err != nil {
			return
		}
		h.wg.Go(func() { h.route(ctx, c) })
	}
}

func (h *psHost) route(ctx context.Context, c *wire.Conn) {
	job := jobOfClient(c.Peer())
	j := h.wait(ctx, job)
	if j == nil {
		h.log.Warn("ps: refused a connection for a job with no shards here", "peer", c.Peer(), "job", job)
		c.Close()
		return
	}
	j.svc.ServeConn(j.ctx, c)
}

// wait returns job's service once it is up, or nil after the timeout.
func (h *psHost) wait(ctx context.Context, job string) *psJob {
	timeout := time.NewTimer(h.timeout)
	defer timeout.Stop()
	for {
		h.mu.Lock()
		j, changed := h.jobs[job], h.changed
		h.mu.Unlock()
		if j != nil || job == "" {
			return j
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		case <-timeout.C:
			return nil
		}
	}
}

func (h *psHost) set(job string, j *psJob) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if j == nil {
		delete(h.jobs, job)
	} else {
		h.jobs[job] = j
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// close stops listening and waits for the connection handlers (which end
// with the contexts of their jobs or of serve).
func (h *psHost) close() {
	h.ln.Close()
	h.wg.Wait()
}

// runPS hosts the shards of one job's PS tasks on this node until ctx
// ends (the job left the node), writing the job's checkpoints if it asks
// for them.
func (a *Agent) runPS(ctx context.Context, tasks []*task) {
	defer cpuset.Serving()() // its goroutines serve other processes while the stage computes
	spec := tasks[0].spec
	a.reportLoading(ctx, tasks, spec.RestoreDir != "")
	shards, svc, err := buildShards(spec, tasks, a.cfg.PSMemory, a.log.With("job", spec.JobID))
	a.reportLoading(ctx, tasks, false)
	if err != nil {
		a.failAll(ctx, tasks, err)
		return
	}
	a.ps.set(spec.JobID, &psJob{svc: svc, ctx: ctx, shards: shards})
	defer func() {
		a.ps.set(spec.JobID, nil)
		for _, s := range shards {
			s.Close() // this node's stage replicas may wait on them directly
		}
	}()
	a.log.Info("ps shards up", "job", spec.JobID, "shards", len(tasks), "gomaxprocs", runtime.GOMAXPROCS(0))
	if err := a.applyLatestMembers(tasks); err != nil {
		a.failAll(ctx, tasks, err)
		<-ctx.Done()
		return
	}
	if err := a.checkpoints(ctx, tasks, shards); err != nil {
		a.failAll(ctx, tasks, err)
	}
	<-ctx.Done()
}

// reportLoading says on tasks whether their shards are loading the
// checkpoint the job restores.
func (a *Agent) reportLoading(ctx context.Context, tasks []*task, loading bool) {
	a.setReports(ctx, tasks, func(r *api.TaskReport) { r.Loading = loading })
}

// checkpoints writes this node's shards of the job's checkpoints every
// CheckpointEvery steps (counted from the job's first step, and after the
// last) and at the steps asked for while the job runs (asked.go) into
// CheckpointDir, until the last or until ctx ends, and reports each
// shard's file on its task. With every shard of the job here it writes
// the manifest too; otherwise the coordinator does once all shards have
// reported. Each is fenced at its step before the step can be applied, so
// the next is set up as soon as the last is written. The job may leave
// the node right after its last step, so a checkpoint whose step has been
// reached is finished even if ctx ends meanwhile. In ASP a checkpoint of
// a step waits for every replica's pushes through it (ps.Shard.Reached)
// and holds faster replicas' later pushes too.
func (a *Agent) checkpoints(ctx context.Context, tasks []*task, shards []*ps.Shard) error {
	spec := tasks[0].spec
	if spec.CheckpointDir == "" {
		return nil
	}
	k := tasks[0].asks
	if k == nil {
		k = newAsks(spec.CheckpointAt)
	}
	w := a.startCheckpointWriter(ctx, tasks, shards)
	plan := checkpointPlan{every: spec.CheckpointEvery, steps: spec.Steps, done: spec.FirstStep}
	for {
		step, asked := plan.next(k.latest())
		if step == 0 { // nothing due until an ask comes
			select {
			case <-k.note:
				continue
			case <-ctx.Done():
				return w.finish()
			}
		}
		wctx, release := untilAsked(ctx, k, plan.done, step)
		var copied int64
		snaps, err := snapshotAt(wctx, a.lease.context(), step, shards, a.checkpointRoom(spec, step, shards, w, &copied))
		cut := release()
		switch {
		case err != nil && ctx.Err() != nil:
			return w.finish() // the job ended before the step
		case err != nil && cut:
			continue // an earlier step was asked for: take it first
		case errors.Is(err, errNoRoom):
			a.checkpointFailed(ctx, tasks, shards, step, err)
		case errors.Is(err, ps.ErrStepPassed):
			a.checkpointFailed(ctx, tasks, shards, step, passedReason(asked))
		case err != nil:
			return errors.Join(fmt.Errorf("checkpoint at step %d: %w", step, err), w.finish())
		default:
			w.add(step, snaps, copied)
		}
		plan.done = step
		if step == spec.Steps {
			return w.finish()
		}
	}
}

// passedReason says why a step training passed before its fence was set
// is not checkpointed: one asked for came too late to the node; a
// periodic one waited for the writer.
func passedReason(asked bool) error {
	if asked {
		return errors.New("skipped: training passed the step asked for before this node heard of it")
	}
	return errors.New("skipped: training passed its step while earlier copies were still being written (a slow disk, or checkpoints too frequent for it)")
}

// add queues step's copies (bytes of them in memory) for writing; it waits
// while the writer is two copies behind, and until they are written when
// any was taken in place, since the shards are held until then (no next
// fence before).
func (w *checkpointWriter) add(step int64, snaps []ps.Snapshot, bytes int64) {
	p := pendingCheckpoint{step: step, snaps: snaps, bytes: bytes, written: make(chan struct{})}
	w.pending.Add(p.bytes)
	w.queue <- p
	if slices.ContainsFunc(snaps, ps.Snapshot.InPlace) {
		<-p.written
	}
}

// snapshotAt copies the shards at step, or takes them in place where room
// says a copy does not fit (ps.SnapshotShardsWithin); when ctx ends first it is
// cancelled only if the shards have not reached the step yet. It is cancelled in
// any case when fence ends: the node's lease ran out.
func snapshotAt(ctx, fence context.Context, step int64, shards []*ps.Shard, room func(int64) (bool, error)) ([]ps.Snapshot, error) {
	wctx, cancel := context.WithCancel(fence)
	defer cancel()
	type copied struct {
		snaps []ps.Snapshot
		err   error
	}
	done := make(chan copied, 1)
	go func() {
		snaps, err := ps.SnapshotShardsWithin(wctx, step, shards, room)
		done <- copied{snaps, err}
	}()
	select {
	case c := <-done:
		return c.snaps, c.err
	case <-ctx.Done():
		if !reached(shards, step) {
			cancel()
		}
		c := <-done
		return c.snaps, c.err
	}
}

// reached reports whether every shard holds everything of step
// (ps.Shard.Reached).
func reached(shards []*ps.Shard, step int64) bool {
	for _, s := range shards {
		if !s.Reached(step) {
			return false
		}
	}
	return true
}

// pendingCheckpoint is a step's copies waiting to be written.
type pendingCheckpoint struct {
	step  int64
	snaps []ps.Snapshot
	bytes int64 // the copies' size in memory (0 in place)
	// written is closed once the writer is done with it, written or not.
	written chan struct{}
}

// checkpointWriter writes a job's checkpoint copies on its own goroutine,
// one at a time, so that the next step's fence is set while the last
// copy is written.
type checkpointWriter struct {
	queue chan pendingCheckpoint
	done  chan error // the writer's first error, once it has stopped
	// writing is the step of the copy being written (0: none), written
	// the bytes of it written so far.
	writing, written atomic.Int64
	// pending is the size of the copies queued or being written, rate
	// the bytes a second the last write went at (0: none yet).
	pending, rate atomic.Int64
}

// checkpointStuckAfter is how long a copy may go without a byte written
// before the node reports it as not written (it goes on waiting for it);
// a variable so that tests can shorten it.
var checkpointStuckAfter = 5 * time.Minute

// progressEvery is how often the node looks at how far the copy being
// written has got: what it reports on the tasks.
func progressEvery() time.Duration {
	return min(time.Second, max(checkpointStuckAfter/10, time.Millisecond))
}

// write writes copy p (writeCheckpoint), recording its step and bytes
// while it does.
func (w *checkpointWriter) write(a *Agent, spec api.Task, shards []*ps.Shard, p pendingCheckpoint) ([]ckpt.FileEntry, error) {
	w.written.Store(0)
	w.writing.Store(p.step)
	defer w.writing.Store(0)
	start := time.Now()
	files, err := a.writeCheckpoint(spec, shards, p, &w.written)
	if d := time.Since(start); err == nil && d > 0 {
		w.rate.Store(int64(float64(w.written.Load()) / d.Seconds()))
	}
	return files, err
}

// watchWrites reports on tasks, every progressEvery until stop is closed,
// the copy being written and how many bytes of it are
// (api.TaskReport.CheckpointWriting: the coordinator waits for a job's
// last checkpoint while it gets further), and a copy that has gone
// checkpointStuckAfter without a byte written as not written (a hung
// filesystem, or a sync that long; the node goes on waiting for it).
func (a *Agent) watchWrites(ctx context.Context, tasks []*task, shards []*ps.Shard, w *checkpointWriter, stop <-chan struct{}) {
	tick := time.NewTicker(progressEvery())
	defer tick.Stop()
	var last api.CheckpointWriting
	progressed, reported := time.Now(), int64(0)
	for {
		select {
		case <-stop:
			a.reportWriting(ctx, tasks, api.CheckpointWriting{})
			return
		case <-tick.C:
		}
		now := api.CheckpointWriting{Step: w.writing.Load(), Bytes: w.written.Load()}
		if now != last {
			progressed, last = time.Now(), now
			a.reportWriting(ctx, tasks, now)
		}
		if d := time.Since(progressed); now.Step > 0 && now.Step != reported && d > checkpointStuckAfter {
			a.checkpointFailed(ctx, tasks, shards, now.Step, fmt.Errorf("no byte written for %s, %d so far (a hung or very slow filesystem?); the checkpoints after it wait",
				d.Round(time.Second), now.Bytes))
			reported = now.Step
		}
	}
}

// reportWriting sets the copy being written on tasks' reports (none when
// its step is 0).
func (a *Agent) reportWriting(ctx context.Context, tasks []*task, w api.CheckpointWriting) {
	a.setReports(ctx, tasks, func(r *api.TaskReport) {
		r.CheckpointWriting = nil
		if w.Step > 0 {
			r.CheckpointWriting = &w
		}
	})
}

// startCheckpointWriter starts the writer of tasks' shards: it writes
// each copy (and the manifest when every shard of the job is here) and
// reports the files on the tasks. A copy whose node's lease has run out is
// not written, nor any after it. A copy that cannot be written (a full
// disk, a lost mount) does not stop training: it is reported on the tasks
// (api.TaskReport.CheckpointFailure) and the next is tried at its step; the
// last step's, which the job waits for, is tried again every
// finalCheckpointRetry until written or the job ends.
func (a *Agent) startCheckpointWriter(ctx context.Context, tasks []*task, shards []*ps.Shard) *checkpointWriter {
	spec := tasks[0].spec
	w := &checkpointWriter{queue: make(chan pendingCheckpoint, 1), done: make(chan error, 1)}
	stop := make(chan struct{})
	a.wg.Go(func() { a.watchWrites(ctx, tasks, shards, w, stop) })
	a.wg.Go(func() {
		defer close(stop)
		var fenced error
		for p := range w.queue {
			if fenced != nil {
				w.letGo(p)
				continue
			}
			files, err := w.write(a, spec, shards, p)
			for err != nil && !errors.Is(err, errFenced) && p.step == spec.Steps {
				a.checkpointFailed(ctx, tasks, shards, p.step, err)
				if retry.Sleep(ctx, finalCheckpointRetry) != nil {
					break
				}
				files, err = w.write(a, spec, shards, p)
			}
			switch {
			case errors.Is(err, errFenced):
				fenced = err
			case err != nil:
				a.checkpointFailed(ctx, tasks, shards, p.step, err)
			default:
				a.reportCheckpoint(ctx, tasks, shards, p.step, files)
				a.log.Info("ps: checkpoint files written", "job", spec.JobID, "step", p.step, "shards", len(shards), "manifest", len(shards) == len(spec.PS))
			}
			w.letGo(p)
		}
		w.done <- fenced
	})
	return w
}

// letGo lets go of p once written or given up: the shards its snapshots
// taken in place hold, and its copies' memory.
func (w *checkpointWriter) letGo(p pendingCheckpoint) {
	for _, s := range p.snaps {
		_ = s.Release() // an error here is the write's, already reported
	}
	w.pending.Add(-p.bytes)
	close(p.written)
}

// finalCheckpointRetry spaces the tries to write the last step's
// checkpoint; a variable so that tests can shorten it.
var finalCheckpointRetry = 5 * time.Second

// errFenced: the node's lease ran out, so it writes no more files.
var errFenced = errors.New("the node's lease ran out")

// writeCheckpoint writes copy p of shards into its step directory, and the
// manifest when every shard of the job is here, adding the bytes it
// writes to written.
func (a *Agent) writeCheckpoint(spec api.Task, shards []*ps.Shard, p pendingCheckpoint, written *atomic.Int64) ([]ckpt.FileEntry, error) {
	if a.lease.context().Err() != nil {
		return nil, fmt.Errorf("checkpoint at step %d not written: %w", p.step, errFenced)
	}
	dir := ckpt.StepDir(spec.CheckpointDir, p.step)
	files, err := writeSnapshots(dir, shards, p.snaps, written)
	if err == nil && len(shards) == len(spec.PS) {
		err = ps.WriteManifest(dir, spec.JobID, p.step, len(spec.PS), files)
	}
	if err != nil {
		removeShardFiles(dir, shards)
		return nil, err
	}
	return files, nil
}

// writeSnapshots writes a checkpoint's shard files: ps.WriteSnapshots, a
// variable so that tests can stand a slow disk in for it.
var writeSnapshots = ps.WriteSnapshots

// removeShardFiles removes what a failed write left of shards' files in
// dir, and dir itself if nothing else is in it (other nodes' shards may
// be), so that a full disk is not kept full by halves of checkpoints. A
// complete checkpoint there (another job's, with a manifest) is left
// whole: its files were not replaced, the write having failed.
func removeShardFiles(dir string, shards []*ps.Shard) {
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return // nothing was written; what is there is not ours
	}
	if _, err := os.Lstat(filepath.Join(dir, ckpt.ManifestName)); err == nil {
		return
	}
	for _, s := range shards {
		os.Remove(filepath.Join(dir, s.FileName()))
	}
	os.Remove(dir) // fails, as it should, when not empty
}

// checkpointFailed says that step's checkpoint of shards was not written:
// in the log, the node's metrics and the tasks' reports.
func (a *Agent) checkpointFailed(ctx context.Context, tasks []*task, shards []*ps.Shard, step int64, err error) {
	spec := tasks[0].spec
	next := "training goes on, the next is tried at its step"
	if step >= spec.Steps {
		next = fmt.Sprintf("the job's last step: tried again every %s while the coordinator waits for it", finalCheckpointRetry)
	}
	a.log.Warn("ps: checkpoint not written; "+next, "job", spec.JobID, "step", step, "shards", len(shards), "err", err)
	a.obs.checkpointFailed()
	a.setReports(ctx, tasks, func(r *api.TaskReport) {
		if r.CheckpointFailure == nil || r.CheckpointFailure.Step != step {
			r.CheckpointFailures++
		}
		r.CheckpointFailure = &api.CheckpointFailure{Step: step, Error: truncateError(err.Error())}
	})
}

// finish waits for the copies queued to be written and returns the
// writer's first error.
func (w *checkpointWriter) finish() error {
	close(w.queue)
	return <-w.done
}

// reportCheckpoint adds each shard's file of step to its task's report,
// keeping the latest api.MaxReportedCheckpoints.
func (a *Agent) reportCheckpoint(ctx context.Context, tasks []*task, shards []*ps.Shard, step int64, files []ckpt.FileEntry) {
	for i, s := range shards {
		for _, t := range tasks {
			if t.spec.Shard != s.Index() {
				continue
			}
			a.setReport(ctx, t, func(r *api.TaskReport) {
				r.Checkpoints = append(r.Checkpoints, api.ShardCheckpoint{Step: step, File: files[i]})
				if n := len(r.Checkpoints); n > api.MaxReportedCheckpoints {
					r.Checkpoints = slices.Clone(r.Checkpoints[n-api.MaxReportedCheckpoints:])
				}
			})
		}
	}
}

// buildShards declares the job's parameters from its model and stage
// layout (pipeline.PSParams) and makes this node's shards of them, each
// with a memory budget of memory bytes (0 = unlimited).
// It returns the shards in index order.
func buildShards(spec api.Task, tasks []*task, memory int64, log *slog.Logger) ([]*ps.Shard, *ps.Service, error) {
	fail := func(err error) ([]*ps.Shard, *ps.Service, error) {
		return nil, nil, fmt.Errorf("ps shards of job %s: %w", spec.JobID, err)
	}
	backend := native.MustCPU()
	cfg, err := config.ParseModel("job "+spec.JobID+" model", []byte(spec.Model))
	if err != nil {
		return fail(err)
	}
	m, err := pipeline.DeclareModel(backend, cfg, spec.Seed)
	if err != nil {
		return fail(err)
	}
	ranges, replicas := layout(spec)
	tables, blocks, err := pipeline.PSParams(m, ranges, spec.Steps)
	if err != nil {
		return fail(err)
	}
	allreduce := make([]bool, len(spec.Layout))
	for i, l := range spec.Layout {
		allreduce[i] = l.DenseSync == api.DenseSyncAllreduce
	}
	pipeline.MirrorBlocks(blocks, len(ranges), allreduce)
	all := pipeline.ShardConfigs(pipeline.ShardSpec{Job: spec.JobID, Model: cfg.Name, Shards: len(spec.PS),
		Mode: psMode(spec.Mode), Replicas: replicas, Allreduce: allreduce, Backend: backend}, tables, blocks)
	tasks = slices.SortedFunc(slices.Values(tasks), func(x, y *task) int { return x.spec.Shard - y.spec.Shard })
	var shards []*ps.Shard // in index order, as ps.CheckpointAll wants them
	for _, t := range tasks {
		c := all[t.spec.Shard]
		c.MemoryBytes = memory
		s, err := newShard(c, spec.RestoreDir)
		if err != nil {
			return fail(err)
		}
		shards = append(shards, s)
	}
	svc, err := ps.NewService(ps.ServiceOptions{Logger: log}, shards...)
	if err != nil {
		return fail(err)
	}
	return shards, svc, nil
}

// newShard makes a fresh shard, or restores it from the checkpoint in
// restoreDir (a step directory) when set.
func newShard(cfg ps.Config, restoreDir string) (*ps.Shard, error) {
	if restoreDir == "" {
		return ps.NewShard(cfg)
	}
	return restoreShard(cfg, restoreDir)
}

// restoreShard is ps.RestoreAs, a variable so that tests can stand a
// large checkpoint on slow storage in for it.
var restoreShard = ps.RestoreAs

// layout returns the stages' layer ranges and replica counts.
func layout(t api.Task) ([]pipeline.Range, []int) {
	ranges := make([]pipeline.Range, len(t.Layout))
	replicas := make([]int, len(t.Layout))
	for i, s := range t.Layout {
		ranges[i] = pipeline.Range{First: s.FirstLayer, Last: s.LastLayer}
		replicas[i] = s.Replicas
	}
	return ranges, replicas
}

func psMode(mode string) ps.Mode {
	if mode == api.ModeASP {
		return ps.ASP
	}
	return ps.BSP
}
