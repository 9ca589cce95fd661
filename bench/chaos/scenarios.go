package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/node"
)

// result is what one scenario measured; a negative duration or count is
// not applicable.
type result struct {
	name       string
	recovery   time.Duration
	twice      int64
	restarts   int
	generation int64
	loss       float64
	refLoss    float64
	identical  string
	stepTime   time.Duration // mean, from the job's start to its finish
	notes      []string
	err        error
	digest     ckptDigest
	// overhead scenario: mean step time without and with checkpoints.
	plain, checked time.Duration
}

// run is one job on one fresh cluster.
type jobRun struct {
	c       *loopback.Cluster
	w       *watcher
	id      string
	dir     string
	ckptDir string
}

// runAll runs the scenarios in order; the first "none" is the reference
// for the others.
func (b *bench) runAll(ctx context.Context) []*result {
	var results []*result
	var ref *result
	for _, name := range b.o.scenarios {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "bench/chaos: scenario %s\n", name)
		var r *result
		if name == "overhead" {
			r = b.overhead(ctx, ref)
		} else {
			r = b.scenario(ctx, name)
		}
		if name == "none" && r.err == nil {
			ref = r
		}
		if ref != nil && r.err == nil && name != "overhead" {
			r.refLoss = ref.loss
			if name != "none" {
				r.identical = identical(ref.digest, r.digest)
			}
		}
		if r.err != nil {
			fmt.Fprintf(b.w, "scenario %s failed: %v\n", name, r.err)
		}
		results = append(results, r)
	}
	return results
}

// fault injects a scenario's fault into a running job and fills in what
// it measures then; finish reads the rest once the job has ended.
type fault func(ctx context.Context, b *bench, j *jobRun, r *result) (finish func(final api.JobStatus), err error)

var faults = map[string]fault{
	"none":                     nil,
	"coordinator":              killCoordinator,
	"sigstop-coordinator":      stopCoordinator(false),
	"sigstop-coordinator-long": stopCoordinator(true),
	"stage-node":               killNode(false),
	"ps-node":                  killNode(true),
	"sigstop-stage":            stopNode(false),
	"sigstop-ps":               stopNode(true),
	"grow":                     growOntoSpare(false),
	"grow-coordinator":         growOntoSpare(true),
}

// scenario runs the job with the checkpoint on a fresh cluster, injects
// the fault and measures.
func (b *bench) scenario(ctx context.Context, name string) *result {
	r := &result{name: name, recovery: -1, twice: -1, identical: "n/a"}
	if name == "none" {
		r.identical = "reference"
	}
	j, err := b.startJob(ctx, name, b.o.every, b.o.steps)
	if err != nil {
		r.err = err
		return r
	}
	defer j.close()
	var finish func(api.JobStatus)
	if f := faults[name]; f != nil {
		if finish, err = f(ctx, b, j, r); err != nil {
			r.err = fmt.Errorf("%w; daemons' logs in %s", err, j.dir)
			return r
		}
	}
	final, err := j.w.final(ctx, b.o.timeout)
	if err != nil {
		r.err = fmt.Errorf("%w; daemons' logs in %s", err, j.dir)
		return r
	}
	if final.State != api.JobDone {
		r.err = fmt.Errorf("job %s ended %s: %s; daemons' logs in %s", final.ID, final.State, final.Reason, j.dir)
		return r
	}
	r.restarts, r.generation, r.loss, r.stepTime = final.Restarts, max(final.Generation, 1), final.Loss, stepTime(final)
	if finish != nil {
		finish(final)
	}
	if r.digest, err = finalCheckpoint(ctx, j.ckptDir, int64(b.o.steps)); err != nil {
		r.notes = append(r.notes, "final checkpoint: "+err.Error())
	}
	if name == "none" {
		r.notes = append(r.notes, fmt.Sprintf("%.1f steps/s, final checkpoint step %d", 1/r.stepTime.Seconds(), r.digest.step))
		for _, f := range slices.Sorted(maps.Keys(r.digest.files)) {
			r.notes = append(r.notes, fmt.Sprintf("%s sha256 %.16s", f, r.digest.files[f]))
		}
	}
	return r
}

// startJob starts a cluster in a directory of its own and submits the job.
func (b *bench) startJob(ctx context.Context, name string, every, steps int) (*jobRun, error) {
	b.runs++
	dir := filepath.Join(b.dir, fmt.Sprintf("%02d-%s", b.runs, name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c, err := loopback.Start(ctx, loopback.Options{Bin: b.heterpsd, Dir: dir, Type: unitType, Catalog: b.catalog, Shares: fullShares(nodes),
		Lease: leaseOf(name)})
	if err != nil {
		return nil, fmt.Errorf("start the cluster: %w; logs in %s", err, dir)
	}
	j := &jobRun{c: c, dir: dir, ckptDir: filepath.Join(dir, "ckpt")}
	if j.id, err = c.Submit(ctx, b.jobTOML(j.ckptDir, every, steps)); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w; logs in %s", err, dir)
	}
	j.w = watch(ctx, c, j.id)
	return j, nil
}

func (j *jobRun) close() {
	j.w.close()
	j.c.Close()
}

// stepTime is a finished job's mean step time, from its start to its end.
func stepTime(s api.JobStatus) time.Duration {
	if s.Started == nil || s.Finished == nil || s.Steps <= loopback.RestoredStep(s) {
		return 0
	}
	return s.Finished.Sub(*s.Started) / time.Duration(s.Steps-loopback.RestoredStep(s))
}

// finalCheckpoint waits for the checkpoint of the last step and digests it.
func finalCheckpoint(ctx context.Context, dir string, steps int64) (ckptDigest, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		cp, err := ckpt.LatestComplete(dir)
		if err == nil && cp.Manifest.Step == steps {
			return digestLatest(dir)
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("the latest is of step %d, not %d", cp.Manifest.Step, steps)
			}
			return ckptDigest{}, err
		}
		select {
		case <-ctx.Done():
			return ckptDigest{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// atFaultPoint waits until the job has done the fault fraction of its
// steps and returns the newest sample.
func (b *bench) atFaultPoint(ctx context.Context, j *jobRun) (sample, error) {
	target := int64(b.o.faultAt * float64(b.o.steps))
	return j.w.waitFor(ctx, fmt.Sprintf("step %d", target), b.o.timeout, func(s api.JobStatus) bool {
		return s.State == api.JobRunning && s.Step >= target
	})
}

// pause waits d unless ctx ends first.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// measureRecovery fills in the recovery time and the steps trained twice
// once the job has ended.
func measureRecovery(j *jobRun, r *result, at sample, fault time.Time) func(api.JobStatus) {
	return func(final api.JobStatus) {
		hist := j.w.history()
		window := 2 * loopback.Heartbeat
		if moved, ok := regenerated(hist, at.s, fault); ok {
			window = max(window, moved.Sub(fault)+loopback.Heartbeat) // reports of the old generation still arrive
		}
		stalled := stalledAt(hist, at.s.ID, fault, at.s.Step, window)
		if x, ok := resumed(hist, at.s.ID, fault, stalled); ok {
			r.recovery = x.at.Sub(fault)
		} else {
			r.notes = append(r.notes, "training never went past the step of the fault")
		}
		trainedTwice(r, at.s, final)
	}
}

// trainedTwice sets the steps r's job trained twice: none unless it
// restarted, else those from the checkpoint it resumed from to the step
// the API showed at the fault — none when that checkpoint is past it
// (the shown step lags the job by up to a heartbeat).
func trainedTwice(r *result, at, final api.JobStatus) {
	r.twice = 0
	if final.ID == at.ID {
		return
	}
	from := loopback.RestoredStep(final)
	r.twice = max(0, at.Step-from)
	r.notes = append(r.notes, fmt.Sprintf("%s restarted as %s from step %d on %s", at.ID, final.ID, from, stageNodes(final)))
	if from > at.Step {
		r.notes = append(r.notes, fmt.Sprintf("the checkpoint it resumed from is past step %d, the one shown at the fault: reports lag up to a heartbeat", at.Step))
	}
}

// killCoordinator kills the coordinator with SIGKILL and restarts it a
// second later with the same flags.
func killCoordinator(ctx context.Context, b *bench, j *jobRun, r *result) (func(api.JobStatus), error) {
	if _, err := b.atFaultPoint(ctx, j); err != nil {
		return nil, err
	}
	at, _ := j.w.last()
	j.c.Coord.Kill()
	fault := time.Now()
	if err := pause(ctx, time.Second); err != nil {
		return nil, err
	}
	if err := j.c.StartCoordinator(ctx); err != nil {
		return nil, fmt.Errorf("restart the coordinator: %w", err)
	}
	r.notes = append(r.notes, fmt.Sprintf("killed at step %d, restarted 1 s later", at.s.Step))
	return measureRecovery(j, r, at, fault), nil
}

// scenarioLease is the nodes' lease where a scenario needs another than
// loopback.Lease.
var scenarioLease = map[string]time.Duration{
	// The daemons' default: a coordinator stopped past a heartbeat timeout
	// but within it finds its nodes still training.
	"sigstop-coordinator": node.DefaultLease,
}

// leaseOf is the nodes' lease in scenario name.
func leaseOf(name string) time.Duration { return cmp.Or(scenarioLease[name], loopback.Lease) }

// stopCoordinator stops the coordinator with SIGSTOP, as a paused VM or a
// swap storm would: for coordStopFor, longer than a heartbeat timeout and
// shorter than the nodes' lease, or (long) for coordLongStopFor, longer
// than the lease. Within the lease the nodes train on, and the
// coordinator, once it runs again, must not take its own silence for
// theirs (no shrink, no restart). Past it the nodes fence their tasks and
// register anew, and the job must fail over to its newest checkpoint
// rather than train on from scratch under its id.
func stopCoordinator(long bool) fault {
	name, stop := "sigstop-coordinator", func(o options) time.Duration { return o.coordStopFor }
	if long {
		name, stop = "sigstop-coordinator-long", func(o options) time.Duration { return o.coordLongStopFor }
	}
	return func(ctx context.Context, b *bench, j *jobRun, r *result) (func(api.JobStatus), error) {
		if _, err := b.atFaultPoint(ctx, j); err != nil {
			return nil, err
		}
		at, _ := j.w.last()
		if err := j.c.Coord.Signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		waitErr := pause(ctx, stop(b.o))
		if err := j.c.Coord.Signal(syscall.SIGCONT); err != nil {
			return nil, err
		}
		if waitErr != nil {
			return nil, waitErr
		}
		resumedAt := time.Now()
		r.notes = append(r.notes, fmt.Sprintf("stopped the coordinator at step %d for %v (nodes' lease %v, heartbeat timeout %v)",
			at.s.Step, stop(b.o), leaseOf(name), 3*loopback.Heartbeat))
		after, err := j.w.waitFor(ctx, "the coordinator's first answer after SIGCONT", b.o.timeout, func(api.JobStatus) bool {
			x, _ := j.w.last()
			return x.at.After(resumedAt)
		})
		if err != nil {
			return nil, err
		}
		r.notes = append(r.notes, fmt.Sprintf("its first status after: step %d (%d steps trained while it was stopped, as far as its nodes had reported)",
			after.s.Step, after.s.Step-at.s.Step))
		// Recovery counts from SIGCONT: nothing can act on the job before.
		// A job that went on under its id, its nodes training meanwhile,
		// has recovered once the coordinator shows it again.
		recovery := measureRecovery(j, r, at, resumedAt)
		return func(final api.JobStatus) {
			if final.ID == at.s.ID && after.s.Step > at.s.Step {
				r.recovery = after.at.Sub(resumedAt)
				trainedTwice(r, at.s, final)
			} else {
				recovery(final)
			}
			r.notes = append(r.notes, whatHappened(at.s, final))
		}, nil
	}
}

// victim picks the node of a running job to hurt: the PS shard's, or a
// stage replica's that holds no PS shard.
func victim(s api.JobStatus, ps bool) (string, error) {
	if ps {
		if len(s.PS) == 0 {
			return "", fmt.Errorf("job %s reports no PS shard", s.ID)
		}
		return s.PS[0], nil
	}
	if len(s.Stages) == 0 {
		return "", fmt.Errorf("job %s reports no stages", s.ID)
	}
	for _, n := range s.Stages[0].Nodes {
		if !contains(s.PS, n) {
			return n, nil
		}
	}
	return "", fmt.Errorf("every node of stage 0 (%v) holds a PS shard (%v)", s.Stages[0].Nodes, s.PS)
}

// victimAtFault waits for the fault point and picks the node to hit: the
// PS shard's or a stage replica's.
func (b *bench) victimAtFault(ctx context.Context, j *jobRun, ps bool) (sample, string, *loopback.Proc, error) {
	if _, err := b.atFaultPoint(ctx, j); err != nil {
		return sample{}, "", nil, err
	}
	at, _ := j.w.last()
	name, err := victim(at.s, ps)
	if err != nil {
		return sample{}, "", nil, err
	}
	p, err := j.c.Node(name)
	return at, name, p, err
}

// killNode kills a node with SIGKILL: the PS shard's or a stage replica's.
func killNode(ps bool) fault {
	return func(ctx context.Context, b *bench, j *jobRun, r *result) (func(api.JobStatus), error) {
		at, name, p, err := b.victimAtFault(ctx, j, ps)
		if err != nil {
			return nil, err
		}
		p.Kill()
		fault := time.Now()
		r.notes = append(r.notes, fmt.Sprintf("killed %s at step %d (stage on %s, PS on %v)", name, at.s.Step, stageNodes(at.s), at.s.PS))
		recovery := measureRecovery(j, r, at, fault)
		return func(final api.JobStatus) {
			recovery(final)
			if final.ID == at.s.ID && final.Generation > at.s.Generation {
				r.notes = append(r.notes, fmt.Sprintf("elastic: generation %d -> %d, stage on %s", max(at.s.Generation, 1), final.Generation, stageNodes(final)))
			}
		}, nil
	}
}

// stopNode stops a node with SIGSTOP for the stop-for flag's time, then
// lets it go on with SIGCONT.
func stopNode(ps bool) fault {
	return func(ctx context.Context, b *bench, j *jobRun, r *result) (func(api.JobStatus), error) {
		at, name, p, err := b.victimAtFault(ctx, j, ps)
		if err != nil {
			return nil, err
		}
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		fault := time.Now()
		waitErr := pause(ctx, b.o.stopFor)
		if err := p.Signal(syscall.SIGCONT); err != nil {
			return nil, err
		}
		if waitErr != nil {
			return nil, waitErr
		}
		resumedAt := time.Now()
		r.notes = append(r.notes, fmt.Sprintf("stopped %s at step %d for %v (stage on %s, PS on %v)", name, at.s.Step, b.o.stopFor, stageNodes(at.s), at.s.PS))
		recovery := measureRecovery(j, r, at, fault)
		return func(final api.JobStatus) {
			recovery(final)
			r.notes = append(r.notes, whatHappened(at.s, final))
			fence, ok := fenced(j.w.history(), at.s, name, fault)
			if !ok {
				r.notes = append(r.notes, fmt.Sprintf("the coordinator never moved the job off %s", name))
				fence = resumedAt
			} else {
				r.notes = append(r.notes, fmt.Sprintf("fenced %.1f s after the stop, resumed %.1f s after it", fence.Sub(fault).Seconds(), resumedAt.Sub(fault).Seconds()))
			}
			r.notes = append(r.notes, staleWrites(p.Log, j.ckptDir, at.s.ID, final.ID, fence))
		}, nil
	}
}

// growOntoSpare grows the job's stage onto the node that hosts none of it,
// the batch split evenly over the replicas, and measures the join: the
// step the coordinator gives, the time until the job reports a step past
// it with the new replica, and the steps trained twice (none, unless the
// job restarted instead). With kill, the coordinator is killed with
// SIGKILL as soon as it has answered (before the spare's next heartbeat
// fetches its task) and restarted a second later.
func growOntoSpare(kill bool) fault {
	return func(ctx context.Context, b *bench, j *jobRun, r *result) (func(api.JobStatus), error) {
		return growOnto(ctx, b, j, r, kill)
	}
}

func growOnto(ctx context.Context, b *bench, j *jobRun, r *result, kill bool) (func(api.JobStatus), error) {
	if _, err := b.atFaultPoint(ctx, j); err != nil {
		return nil, err
	}
	at, _ := j.w.last()
	spare, err := spareNode(j.c, at.s)
	if err != nil {
		return nil, err
	}
	req := evenGrow(at.s, spare, b.o.batch)
	body, _ := json.Marshal(req)
	asked := time.Now()
	var grown api.JobStatus
	for try := 0; ; try++ { // until every replica has reported its data position
		err = j.c.Call(ctx, "PATCH", "/v1/jobs/"+at.s.ID, api.ContentTypeJSON, string(body), &grown)
		if err == nil || try == 20 || !strings.Contains(err.Error(), "try again") {
			break
		}
		if err := pause(ctx, loopback.Heartbeat/2); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("grow onto %s: %w", spare, err)
	}
	answered := time.Since(asked)
	if kill {
		j.c.Coord.Kill()
		killed := time.Since(asked)
		if err := pause(ctx, time.Second); err != nil {
			return nil, err
		}
		if err := j.c.StartCoordinator(ctx); err != nil {
			return nil, fmt.Errorf("restart the coordinator: %w", err)
		}
		r.notes = append(r.notes, fmt.Sprintf("killed the coordinator %s after asking, restarted 1 s later", killed.Round(time.Millisecond)))
	}
	r.notes = append(r.notes, fmt.Sprintf("grew onto %s at step %d (stage on %s, generation %d -> %d), answered in %s",
		spare, at.s.Step, stageNodes(at.s), max(at.s.Generation, 1), grown.Generation, answered.Round(time.Millisecond)))
	joined, err := j.w.waitFor(ctx, "the new replica's first steps", b.o.timeout, func(s api.JobStatus) bool {
		return s.Generation >= grown.Generation && s.TrainedOn(spare)
	})
	if err != nil {
		return nil, err
	}
	r.recovery = joined.at.Sub(asked)
	r.notes = append(r.notes, fmt.Sprintf("the job ran on %s past step %d %.1f s after the request", stageNodes(joined.s), joined.s.Step, r.recovery.Seconds()))
	return func(final api.JobStatus) {
		trainedTwice(r, at.s, final)
		r.notes = append(r.notes, fmt.Sprintf("ended on %s, generation %d", stageNodes(final), final.Generation))
		if kill {
			r.notes = append(r.notes, handedOver(j.c.Coord.Log, spare))
		}
	}, nil
}

// handedOver says whether the coordinator whose log is at path handed
// node its task over when it registered again (it had not fetched it
// before the kill), or the node had it already.
func handedOver(path, node string) string {
	log, err := os.ReadFile(path)
	switch {
	case err != nil:
		return fmt.Sprintf("the restarted coordinator's log: %v", err)
	case bytes.Contains(log, []byte(`msg="handing over tasks the node never got"`)) && bytes.Contains(log, []byte("node="+node+" ")):
		return fmt.Sprintf("%s had not fetched its task before the kill: the restarted coordinator handed it over", node)
	default:
		return fmt.Sprintf("%s had fetched its task before the kill: the restarted coordinator adopted it", node)
	}
}

// spareNode is a node of the cluster that hosts no stage replica and no
// PS shard of s.
func spareNode(c *loopback.Cluster, s api.JobStatus) (string, error) {
	for _, p := range c.Nodes {
		if !contains(s.PS, p.Name) && (len(s.Stages) == 0 || !contains(s.Stages[0].Nodes, p.Name)) {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("job %s leaves no node spare (stage on %s, PS on %v)", s.ID, stageNodes(s), s.PS)
}

// evenGrow is the resize that keeps s's replicas and adds one on spare,
// batch split evenly over them all.
func evenGrow(s api.JobStatus, spare string, batch int) api.ResizeRequest {
	st := s.Stages[0]
	n := len(st.Replicas) + 1
	req := api.ResizeRequest{Stage: 0}
	ids := slices.Sorted(slices.Values(st.Replicas))
	for i, id := range ids {
		req.Replicas, req.Batches = append(req.Replicas, id), append(req.Batches, batch/n+boolInt(i < batch%n))
	}
	req.Add = []api.NewReplica{{Node: spare, Batch: batch/n + boolInt(len(ids) < batch%n)}}
	return req
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// whatHappened says how the job got past a fault.
func whatHappened(at, final api.JobStatus) string {
	switch {
	case final.ID != at.ID:
		return "the job restarted from a checkpoint"
	case final.Generation > at.Generation:
		return fmt.Sprintf("the job went on elastic (generation %d -> %d)", max(at.Generation, 1), final.Generation)
	default:
		return "the job went on unchanged"
	}
}

// fenced returns when the coordinator moved the job off node: the first
// sample after the fault in which the job was replaced, restarting or
// resized without the node.
func fenced(samples []sample, at api.JobStatus, node string, fault time.Time) (time.Time, bool) {
	for _, x := range samples {
		if !x.at.After(fault) {
			continue
		}
		if x.s.ID != at.ID || x.s.State == api.JobRestarting || x.s.State == api.JobFailed || x.s.Generation > at.Generation ||
			(len(x.s.Stages) > 0 && !contains(x.s.Stages[0].Nodes, node) && !contains(x.s.PS, node)) {
			return x.at, true
		}
	}
	return time.Time{}, false
}

// staleWrites looks for checkpoint files the stopped node wrote after it
// was fenced: in its log ("ps: checkpoint files written" lines timed after
// the fence) and, when the job was restarted, among the files under the
// checkpoint directory changed after the fence that belong to the old job.
func staleWrites(logPath, ckptDir, oldJob, newJob string, fence time.Time) string {
	logged, err := loggedWritesAfter(logPath, fence)
	if err != nil {
		return "stale writes: " + err.Error()
	}
	var files []string
	if newJob != oldJob {
		files, err = oldJobFilesAfter(ckptDir, oldJob, fence)
		if err != nil {
			return "stale writes: " + err.Error()
		}
	}
	if len(logged) == 0 && len(files) == 0 {
		return "no stale write"
	}
	return fmt.Sprintf("STALE WRITES after the fence: log %v; files of %s %v", logged, oldJob, files)
}

// loggedWritesAfter returns the node log's checkpoint-write lines timed
// after t.
func loggedWritesAfter(logPath string, t time.Time) ([]string, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "checkpoint files written") {
			continue
		}
		if at, ok := logTime(line); ok && at.After(t) {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

// logTime reads the time= field of a slog text line.
func logTime(line string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	field, _, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339Nano, field)
	return at, err == nil
}

// oldJobFilesAfter lists the shard files under root modified after t whose
// metadata names job.
func oldJobFilesAfter(root, job string, t time.Time) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".safetensors") {
			return err
		}
		info, err := d.Info()
		if err != nil || !info.ModTime().After(t) {
			return err
		}
		f, err := ckpt.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if owner, _ := f.Meta("heterps.ps.job"); owner == job {
			rel, _ := filepath.Rel(root, path)
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}

// stageNodes names the nodes of a job's stage replicas.
func stageNodes(s api.JobStatus) string {
	if len(s.Stages) == 0 {
		return "[]"
	}
	return fmt.Sprint(s.Stages[0].Nodes)
}

// overhead runs the job of overheadSteps without checkpoints and with
// them, overheadRuns times each (the reference run counting as one with
// when it is as long), and compares the best mean step times.
func (b *bench) overhead(ctx context.Context, ref *result) *result {
	r := &result{name: "overhead", recovery: -1, twice: -1, identical: "n/a"}
	var with, without []time.Duration
	if ref != nil && ref.stepTime > 0 && b.o.overheadSteps == b.o.steps {
		with = append(with, ref.stepTime)
	}
	for len(without) < b.o.overheadRuns || len(with) < b.o.overheadRuns {
		for _, every := range []int{0, b.o.every} {
			list := &without
			if every > 0 {
				list = &with
			}
			if len(*list) >= b.o.overheadRuns {
				continue
			}
			d, err := b.timedRun(ctx, every)
			if err != nil {
				r.err = err
				return r
			}
			*list = append(*list, d)
		}
	}
	r.plain, r.checked = slices.Min(without), slices.Min(with)
	r.notes = append(r.notes, fmt.Sprintf("mean step time without [checkpoint] %.2f ms, with every = %d %.2f ms (best of %d each): overhead %+.1f %% (bound %.1f %%)",
		ms(r.plain), b.o.every, ms(r.checked), b.o.overheadRuns, overheadPct(r.plain, r.checked), overheadBound))
	r.notes = append(r.notes, fmt.Sprintf("runs without %v, with %v", msList(without), msList(with)))
	span := r.plain * time.Duration(b.o.overheadSteps)
	r.notes = append(r.notes, fmt.Sprintf("runs of %d steps; a run's span is known to a heartbeat (%v): +-%.1f %% of the faster one's %.1f s",
		b.o.overheadSteps, loopback.Heartbeat, 100*loopback.Heartbeat.Seconds()/span.Seconds(), span.Seconds()))
	return r
}

// timedRun runs the job once undisturbed and returns its mean step time.
func (b *bench) timedRun(ctx context.Context, every int) (time.Duration, error) {
	j, err := b.startJob(ctx, fmt.Sprintf("overhead-every-%d", every), every, b.o.overheadSteps)
	if err != nil {
		return 0, err
	}
	defer j.close()
	final, err := j.w.final(ctx, b.o.timeout)
	if err != nil {
		return 0, fmt.Errorf("%w; daemons' logs in %s", err, j.dir)
	}
	if final.State != api.JobDone || stepTime(final) <= 0 {
		return 0, fmt.Errorf("job %s ended %s: %s; daemons' logs in %s", final.ID, final.State, final.Reason, j.dir)
	}
	return stepTime(final), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.2f ms", ms(d)))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// overheadPct is how much longer a step with checkpoints takes, in %.
func overheadPct(plain, checked time.Duration) float64 {
	return 100 * (float64(checked) - float64(plain)) / float64(plain)
}

// regenerated returns when the job was first seen with a newer generation
// (resized around the fault) after the fault.
func regenerated(samples []sample, at api.JobStatus, fault time.Time) (time.Time, bool) {
	for _, x := range samples {
		if x.at.After(fault) && x.s.ID == at.ID && x.s.Generation > at.Generation {
			return x.at, true
		}
	}
	return time.Time{}, false
}

// fullShares is n CPU shares of 1: nodes that are not throttled.
func fullShares(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
