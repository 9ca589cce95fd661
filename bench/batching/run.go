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
// batches and step times in node order (n0, n1).
type sample struct {
	at          time.Time
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

// trace is one run: what ran and every sample of it.
type trace struct {
	level     int
	shares    [2]float64
	mode      string
	samples   []sample
	throttles []throttle
	started   time.Time
	finished  time.Time
	final     api.JobStatus
	err       error
}

// levelResults are the H-level runs by level and mode.
type levelResults struct {
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

// runLevels runs every mode at every H-level.
func (b *bench) runLevels(ctx context.Context) *levelResults {
	r := &levelResults{levels: b.o.levels, modes: b.o.modes, runs: map[int]map[string]*trace{}}
	for _, h := range b.o.levels {
		r.runs[h] = map[string]*trace{}
		for _, m := range b.o.modes {
			if ctx.Err() != nil {
				return r
			}
			t := &trace{level: h, shares: sharePairs[h], mode: m}
			b.runOne(ctx, t)
			r.runs[h][m] = t
			fmt.Fprintf(os.Stderr, "bench/batching: H-%d %s: %s\n", h, m, t.summary())
		}
	}
	return r
}

// runInterference runs the H-1 pair, dynamic then uniform, halving n0's
// share at 30 % of the steps and restoring it at 60 %.
func (b *bench) runInterference(ctx context.Context) []*trace {
	var out []*trace
	pair := sharePairs[1]
	for _, m := range []string{config.BatchingDynamic, config.BatchingUniform} {
		if ctx.Err() != nil {
			break
		}
		t := &trace{level: 1, shares: pair, mode: m, throttles: []throttle{
			{step: int64(0.3 * float64(b.o.steps)), node: 0, share: pair[0] / 2},
			{step: int64(0.6 * float64(b.o.steps)), node: 0, share: pair[0]},
		}}
		b.runOne(ctx, t)
		out = append(out, t)
		fmt.Fprintf(os.Stderr, "bench/batching: interference %s: %s\n", m, t.summary())
	}
	return out
}

func (t *trace) summary() string {
	if t.err != nil {
		return "FAILED: " + t.err.Error()
	}
	return fmt.Sprintf("%.1f s, %d samples, %d adjustments, loss %.4f", t.finished.Sub(t.started).Seconds(), len(t.samples), adjustments(t.final.Batching), t.final.Loss)
}

// runOne runs t on a fresh cluster and records its samples; a failure is
// t.err, with where the logs are.
func (b *bench) runOne(ctx context.Context, t *trace) {
	b.runs++
	dir := filepath.Join(b.dir, fmt.Sprintf("%02d-h%d-%s", b.runs, t.level, t.mode))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.err = err
		return
	}
	c, err := loopback.Start(ctx, loopback.Options{Bin: b.heterpsd, Dir: dir, Type: unitType, Catalog: b.catalog, Shares: t.shares[:]})
	if err != nil {
		t.err = fmt.Errorf("start the cluster: %w; logs in %s", err, dir)
		return
	}
	defer c.Close()
	id, err := c.Submit(ctx, b.jobTOML(t.mode))
	if err == nil {
		err = b.poll(ctx, c, id, t)
	}
	if err != nil {
		t.err = fmt.Errorf("%w; logs in %s", err, dir)
	}
}

// errTimeout is wrapped when a job runs past --timeout.
var errTimeout = errors.New("deadline passed")

// poll records the job's status every pollEvery until it is final, and
// sends t's throttles when the job reaches their steps.
func (b *bench) poll(ctx context.Context, c *loopback.Cluster, id string, t *trace) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.After(b.o.timeout)
	next := 0 // the next throttle to send
	for {
		s, err := c.Job(ctx, id)
		if err == nil {
			t.add(s)
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
			return fmt.Errorf("job %s not done after %v: %w (at step %d, %s)", id, b.o.timeout, errTimeout, s.Step, s.State)
		case <-tick.C:
		}
	}
}

// send applies throttle i now.
func (t *trace) send(ctx context.Context, c *loopback.Cluster, i int) error {
	th := &t.throttles[i]
	if err := c.Throttle(ctx, c.Nodes[th.node].Name, th.share); err != nil {
		return err
	}
	last := t.samples[len(t.samples)-1]
	th.at, th.atStep, th.adjAt = time.Now(), last.step, last.adjustments
	return nil
}

// end records the final status: the job must have finished every step.
func (t *trace) end(s api.JobStatus) error {
	t.final = s
	if s.Started != nil {
		t.started = *s.Started
	}
	if s.Finished != nil {
		t.finished = *s.Finished
	}
	if s.State != api.JobDone {
		return fmt.Errorf("job %s ended %s at step %d: %s", s.ID, s.State, s.Step, s.Reason)
	}
	if s.Started == nil || s.Finished == nil {
		return fmt.Errorf("job %s is done but its status has no start or finish time", s.ID)
	}
	return nil
}

// add records s as a sample, the stage's replicas in node order.
func (t *trace) add(s api.JobStatus) {
	x := sample{at: time.Now(), step: s.Step, loss: s.Loss, adjustments: adjustments(s.Batching)}
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

// jobTOML is the job file of a run in batching mode mode.
func (b *bench) jobTOML(mode string) []byte {
	return fmt.Appendf(nil, "version = 1\nname = \"batching\"\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\nmode = \"bsp\"\nseed = 1\n[batching]\nmode = %q\n",
		modelName, dataSpec, b.o.batch, b.o.steps, b.limit, mode)
}

// adjustments is the dynamic controller's count in a job's status.
func adjustments(b *api.BatchingStatus) int {
	if b == nil {
		return 0
	}
	return b.Adjustments
}
