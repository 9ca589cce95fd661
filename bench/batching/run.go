package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// pollEvery is how often a run asks the coordinator for its job.
const pollEvery = 100 * time.Millisecond

// sample is one answer of the coordinator about the job, with the stage's
// batches and step times in node order (n0, n1); job is the job's id
// (kill-restart resizing replaces it) and restored the step it started at.
type sample struct {
	at          time.Time
	job         string
	restored    int64
	step        int64
	loss        float64
	batches     []int
	seconds     []float64
	adjustments int
}

// throttle is a scripted change of a node's CPU share once the job
// reaches a step; at and atStep say when it was sent.
type throttle struct {
	step   int64
	node   int
	share  float64
	at     time.Time
	atStep int64
	adjAt  int
}

// Parts of the benchmark a run belongs to.
const (
	partLevels       = "levels"
	partInterference = "interference"
	partResize       = "resize"
)

// trace is one run: what ran and every sample of it.
type trace struct {
	part      string
	model     modelSpec
	sync      string
	level     int
	shares    [2]float64
	mode      string
	resize    string // "" for the job file's default; else in-place or restart, with checkpoints
	samples   []sample
	throttles []throttle
	started   time.Time
	finished  time.Time
	final     api.JobStatus
	err       error
}

// levelResults are one model's H-level runs in one sync mode, by level
// and batching mode.
type levelResults struct {
	model  modelSpec
	sync   string
	levels []int
	modes  []string
	runs   map[int]map[string]*trace
}

func (r *levelResults) get(level int, mode string) *trace { return r.runs[level][mode] }

func (r *levelResults) all() []*trace {
	var out []*trace
	for _, h := range r.levels {
		for _, m := range r.modes {
			if t := r.get(h, m); t != nil {
				out = append(out, t)
			}
		}
	}
	return out
}

// results are every part's runs.
type results struct {
	groups       []*levelResults // by model, then sync mode
	interference []*trace
	resize       []*trace
}

func (r *results) all() []*trace {
	var out []*trace
	for _, g := range r.groups {
		out = append(out, g.all()...)
	}
	out = append(out, r.interference...)
	return append(out, r.resize...)
}

// runLevels runs every batching mode at every H-level for model m in
// sync mode sync.
func (b *bench) runLevels(ctx context.Context, m modelSpec, sync string) *levelResults {
	r := &levelResults{model: m, sync: sync, levels: b.o.levels, modes: b.o.modes, runs: map[int]map[string]*trace{}}
	for _, h := range b.o.levels {
		r.runs[h] = map[string]*trace{}
		for _, mode := range b.o.modes {
			if ctx.Err() != nil {
				return r
			}
			t := &trace{part: partLevels, model: m, sync: sync, level: h, shares: sharePairs[h], mode: mode}
			b.runOne(ctx, t)
			r.runs[h][mode] = t
			fmt.Fprintf(os.Stderr, "bench/batching: %s %s H-%d %s: %s\n", m.name, sync, h, mode, t.summary())
		}
	}
	return r
}

// runInterference runs the interference traces of m, one after the other.
func (b *bench) runInterference(ctx context.Context, m modelSpec, sync string) []*trace {
	var out []*trace
	for _, t := range interferenceTraces(m, sync, b.o.interSteps) {
		if ctx.Err() != nil {
			break
		}
		b.runOne(ctx, t)
		out = append(out, t)
		fmt.Fprintf(os.Stderr, "bench/batching: interference %s %s %s: %s\n", m.name, sync, t.mode, t.summary())
	}
	return out
}

// interferenceTraces are m's H-1 pair, dynamic then uniform, for steps
// steps (0: m's own), halving n0's share at 30 % of the steps and
// restoring it at 60 %.
func interferenceTraces(m modelSpec, sync string, steps int) []*trace {
	if steps > 0 {
		m.steps = steps
	}
	pair := sharePairs[1]
	var out []*trace
	for _, mode := range []string{config.BatchingDynamic, config.BatchingUniform} {
		out = append(out, &trace{part: partInterference, model: m, sync: sync, level: 1, shares: pair, mode: mode, throttles: []throttle{
			{step: int64(0.3 * float64(m.steps)), node: 0, share: pair[0] / 2},
			{step: int64(0.6 * float64(m.steps)), node: 0, share: pair[0]},
		}})
	}
	return out
}

func (t *trace) summary() string {
	if t.err != nil {
		return "FAILED: " + t.err.Error()
	}
	out := fmt.Sprintf("%.1f s, %d samples, %d adjustments, loss %.4f", t.finished.Sub(t.started).Seconds(), len(t.samples), adjustments(t.final.Batching), t.final.Loss)
	if b := t.final.Batching; b != nil && t.mode == config.BatchingDynamic && b.Adjustments == 0 {
		out += fmt.Sprintf("; batching %s, the controller's last decision: %.300s", b.Mode, b.Decision)
	}
	return out
}

// runOne runs t on a fresh cluster and records its samples; a failure is
// t.err, with where the logs are.
func (b *bench) runOne(ctx context.Context, t *trace) {
	b.runs++
	name := fmt.Sprintf("%02d-%s-%s-h%d-%s", b.runs, t.model.name, t.sync, t.level, t.mode)
	if t.resize != "" {
		name += "-" + t.resize
	}
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.err = err
		return
	}
	c, err := loopback.Start(ctx, loopback.Options{Bin: b.heterpsd, Dir: dir, Type: unitType, Catalog: b.catalog, Shares: t.shares[:], Heartbeat: b.o.heartbeat})
	if err != nil {
		t.err = fmt.Errorf("start the cluster: %w; logs in %s", err, dir)
		return
	}
	defer c.Close()
	id, err := c.Submit(ctx, jobTOML(t, b.limits[t.model.name], filepath.Join(dir, "checkpoints"), b.o.every))
	if err == nil {
		err = poll(ctx, c, id, t, b.o.timeout)
	}
	if err != nil {
		t.err = fmt.Errorf("%w; logs in %s", err, dir)
	}
}

// errTimeout is wrapped when a job runs past --timeout.
var errTimeout = errors.New("deadline passed")

// coordinator is what a run asks of its cluster's coordinator
// (*loopback.Cluster).
type coordinator interface {
	Job(ctx context.Context, id string) (api.JobStatus, error)
	Throttle(ctx context.Context, node string, share float64) error
}

// poll records the job's status every pollEvery until it is final,
// following the job that restarted it when one did, and sends t's
// throttles when the job reaches their steps.
func poll(ctx context.Context, c coordinator, id string, t *trace, timeout time.Duration) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.After(timeout)
	next := 0 // the next throttle to send
	for {
		s, err := c.Job(ctx, id)
		if err == nil {
			t.add(s)
			if s.RestartedAs != "" { // kill-restart resizing, or a failure with restarts
				id = s.RestartedAs
				continue
			}
			if next < len(t.throttles) && s.Step >= t.throttles[next].step {
				if err := t.send(ctx, c, next); err != nil {
					return err
				}
				next++
			}
			if s.State.Final() {
				return t.end(s)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("job %s not done after %v: %w (at step %d, %s)", id, timeout, errTimeout, s.Step, s.State)
		case <-tick.C:
		}
	}
}

// send applies throttle i now.
func (t *trace) send(ctx context.Context, c coordinator, i int) error {
	th := &t.throttles[i]
	if err := c.Throttle(ctx, fmt.Sprintf("n%d", th.node), th.share); err != nil {
		return err
	}
	last := t.samples[len(t.samples)-1]
	th.at, th.atStep, th.adjAt = time.Now(), last.step, last.adjustments
	return nil
}

// end records the final status of the job chain's last job: it must
// have finished every step. The run started with the chain's first job.
func (t *trace) end(s api.JobStatus) error {
	t.final = s
	if s.Finished != nil {
		t.finished = *s.Finished
	}
	if s.State != api.JobDone {
		return fmt.Errorf("job %s ended %s at step %d: %s", s.ID, s.State, s.Step, s.Reason)
	}
	if t.started.IsZero() || s.Finished == nil {
		return fmt.Errorf("job %s is done but its status has no start or finish time", s.ID)
	}
	return nil
}

// add records s as a sample, the stage's replicas in node order.
func (t *trace) add(s api.JobStatus) {
	if t.started.IsZero() && s.Started != nil {
		t.started = *s.Started
	}
	x := sample{at: time.Now(), job: s.ID, restored: loopback.RestoredStep(s), step: s.Step, loss: s.Loss, adjustments: adjustments(s.Batching)}
	if len(s.Stages) == 1 && len(s.Stages[0].Nodes) == replicas && len(s.Stages[0].Batches) == replicas {
		st := s.Stages[0]
		x.batches, x.seconds = make([]int, replicas), make([]float64, replicas)
		for k, name := range st.Nodes {
			i := nodeIndex(name)
			if i < 0 || i >= replicas {
				continue
			}
			x.batches[i] = st.Batches[k]
			if k < len(st.StepSeconds) {
				x.seconds[i] = st.StepSeconds[k]
			}
		}
	}
	t.samples = append(t.samples, x)
}

// nodeIndex is i for the node named ni, else -1.
func nodeIndex(name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "n%d", &i); err != nil {
		return -1
	}
	return i
}

// jobTOML is the job file of run t: its model on its data, BSP or ASP,
// its batching mode and, when t.resize is set, that resize mode with
// checkpoints into ckptDir every `every` steps (0: a fifth of the steps).
func jobTOML(t *trace, limit float64, ckptDir string, every int) []byte {
	m := t.model
	job := fmt.Appendf(nil, "version = 1\nname = \"batching\"\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\nmode = %q\nseed = 1\n[batching]\nmode = %q\n",
		m.name, m.data, m.batch, m.steps, limit, t.sync, t.mode)
	if t.resize == "" {
		return job
	}
	if every <= 0 {
		every = max(1, m.steps/5)
	}
	return fmt.Appendf(job, "resize = %q\n[checkpoint]\ndir = %q\nevery = %d\n", t.resize, ckptDir, every)
}

// adjustments is the dynamic controller's count in a job's status.
func adjustments(b *api.BatchingStatus) int {
	if b == nil {
		return 0
	}
	return b.Adjustments
}
