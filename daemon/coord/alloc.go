package coord

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/alloc"
	"github.com/heterps/heterps/daemon/api"
)

// Quality-driven allocation (SLAQ, issue 12; the method is in package
// alloc). With Config.AllocPolicy set, every AllocEpoch the coordinator
// fits each running job's loss history and step times and divides the
// cluster's units among the jobs with alloc.Allocate.
//
// The unit is one unit (a core) of a node. A job placed while the
// allocator is on gets the smallest placement, one unit of one node (the
// planner sees one free unit per type), and nodes are shared by as many
// jobs as they have units. A running job's units change in place: the
// coordinator gives its stage task a new Generation with Units = u and
// TaskCPUShare = u/N (N the node's units), which the node's duty cycle
// enforces from the worker's next step (daemon/node/units.go), so that a
// step takes C/u + O as the step model says. The worker keeps its threads
// and its replicas, so a job's math does not depend on its allocation.
// Since a job's one replica is pinned to its node, the allocation is made
// node by node: the jobs on a node share that node's units (less those
// held by jobs the allocator does not manage: several stages or
// replicas). A job not measured yet (no loss, or no step time) keeps one
// unit.
//
// A job with target_loss_reduction stops, done, once its normalised loss
// reduction (L_0 - L)/(L_0 - L_min), L the mean of its last losses and
// L_min the fitted curve's floor, reaches the target; the check runs each
// epoch, also with the allocator off. A job's history and step times are
// written to its record every progressSaveEvery, so a restarted
// coordinator goes on from them (L_0 stays the job's first loss).

// Allocator defaults and bounds.
const (
	DefaultAllocEpoch = 5 * time.Second
	// maxHistory bounds a job's (step, loss) record: past it every other
	// point of the older half is dropped.
	maxHistory = 2000
	// maxStepSamples bounds a job's step-time samples (the newest kept).
	maxStepSamples = 256
	// lossWindow is how many of the latest losses measure a job's quality.
	lossWindow = 5
)

// AllocOff is the policy name that turns the allocator off.
const AllocOff = "off"

// allocPolicy is the configured policy, "" when the allocator is off.
func (c *Coordinator) allocPolicy() alloc.Policy {
	if c.cfg.AllocPolicy == AllocOff {
		return ""
	}
	return alloc.Policy(c.cfg.AllocPolicy)
}

// checkAllocConfig checks Config's allocator fields and fills defaults.
func checkAllocConfig(cfg *Config) error {
	if cfg.AllocPolicy == "" {
		cfg.AllocPolicy = AllocOff
	}
	if cfg.AllocPolicy != AllocOff {
		if _, err := alloc.ParsePolicy(cfg.AllocPolicy); err != nil {
			return fmt.Errorf("alloc policy: %w (or %q)", err, AllocOff)
		}
	}
	if cfg.AllocEpoch < 0 {
		return fmt.Errorf("alloc epoch %v: want > 0", cfg.AllocEpoch)
	}
	setDefault(&cfg.AllocEpoch, DefaultAllocEpoch)
	return nil
}

// allocLoop runs an allocation epoch every AllocEpoch until ctx ends, then
// writes the traces' last lines.
func (c *Coordinator) allocLoop(ctx context.Context) {
	tick := time.NewTicker(c.cfg.AllocEpoch)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			last := c.takeTraces()
			c.mu.Unlock()
			c.writeTraces(last)
			return
		case now := <-tick.C:
			c.allocEpoch(now)
		}
	}
}

// allocInput is what an epoch needs of one job, copied under c.mu.
type allocInput struct {
	j         *job
	gen       int64
	node      *node // nil: not managed (keeps its units)
	nodeUnits int
	history   []alloc.Point
	samples   []alloc.StepSample
	units     int
	priority  float64
	price     float64
	remaining float64
	target    float64
}

// allocEpoch fits every tracked job, stops those at their target, and
// under a policy divides the units; then it writes the traces.
func (c *Coordinator) allocEpoch(now time.Time) {
	c.mu.Lock()
	in := c.allocInputs()
	held := c.unmanagedUnits()
	traces := c.takeTraces()
	c.mu.Unlock()

	start := time.Now()
	fits := c.fitJobs(in)
	var grants []int
	if p := c.allocPolicy(); p != "" {
		grants = c.decide(p, in, fits, held)
	}
	took := time.Since(start)

	c.mu.Lock()
	c.applyEpoch(in, fits, grants, took, now)
	c.saveProgress(now)
	c.mu.Unlock()
	c.writeTraces(traces)
}

// allocInputs snapshots the running jobs the allocator tracks. c.mu is
// held.
func (c *Coordinator) allocInputs() []allocInput {
	var in []allocInput
	for _, j := range c.jobs {
		a := j.alloc
		if j.state != api.JobRunning || a == nil {
			continue
		}
		x := allocInput{j: j, gen: j.gen, history: slices.Clone(a.history), samples: slices.Clone(a.samples),
			priority: j.file.JobPriority(), target: j.file.TargetLossReduction}
		if t := j.managedTask(); t != nil {
			x.node, x.nodeUnits, x.units = t.node, t.node.stageUnits(), t.task.Units
			x.price = c.price(t.node.req.Type)
			if len(a.history) > 0 {
				x.remaining = float64(j.file.TotalSteps()) - a.history[len(a.history)-1].Iter
			}
		}
		in = append(in, x)
	}
	return in
}

// managedTask is j's stage task when j has exactly one, placed on a node:
// the jobs whose units the allocator changes.
func (j *job) managedTask() *taskRun {
	var st *taskRun
	for _, t := range j.tasks {
		if t.task.Role != api.RoleStage {
			continue
		}
		if st != nil {
			return nil
		}
		st = t
	}
	if st == nil || st.node == nil {
		return nil
	}
	return st
}

// unmanagedUnits is, per node, the units held by stage tasks of running
// jobs the allocator does not resize. c.mu is held.
func (c *Coordinator) unmanagedUnits() map[*node]int {
	held := map[*node]int{}
	for _, j := range c.jobs {
		if j.state != api.JobRunning || (j.alloc != nil && j.managedTask() != nil) {
			continue
		}
		for _, t := range j.tasks {
			if t.task.Role == api.RoleStage && t.node != nil {
				held[t.node] += t.task.Units
			}
		}
	}
	return held
}

// jobFit is an epoch's view of one job's measurements.
type jobFit struct {
	curve   *alloc.Curve // nil: too few points, or no family fits
	step    alloc.StepModel
	timed   bool    // step holds a fit of measured step times
	quality float64 // measured normalised loss reduction (0 without a curve)
}

func (c *Coordinator) fitJobs(in []allocInput) []jobFit {
	fits := make([]jobFit, len(in))
	for i, x := range in {
		fits[i] = c.fitJob(x)
	}
	return fits
}

// fitJob fits x's loss curve and step times; a job whose fit panics
// (contain.go) is left unfitted, as one not measured yet.
func (c *Coordinator) fitJob(x allocInput) jobFit {
	var panicked error // logged by recoverInto; the result is then the zero fit
	defer c.recoverInto(&panicked, x.j.id, "fitting")
	return fitJob(x)
}

func fitJob(x allocInput) jobFit {
	var f jobFit
	if len(x.history) >= alloc.MinPoints {
		if c, err := alloc.FitCurve(x.history, alloc.FitOptions{}); err == nil {
			f.curve = &c
			f.quality = measuredQuality(x.history, c)
		}
	}
	if len(x.samples) > 0 {
		if m, err := alloc.FitStepModel(x.samples); err == nil {
			f.step, f.timed = m, true
		}
	}
	return f
}

// measuredQuality is the normalised loss reduction of the mean of the last
// lossWindow losses against the first loss and the curve's floor.
func measuredQuality(h []alloc.Point, c alloc.Curve) float64 {
	last := h[max(0, len(h)-lossWindow):]
	sum := 0.0
	for _, p := range last {
		sum += p.Loss
	}
	return alloc.NormalisedReduction(h[0].Loss, sum/float64(len(last)), c.Floor())
}

// decide runs the policy node by node and returns each input's units (0
// for jobs it leaves alone).
func (c *Coordinator) decide(p alloc.Policy, in []allocInput, fits []jobFit, held map[*node]int) []int {
	grants := make([]int, len(in))
	byNode := map[*node][]int{}
	var order []*node
	for i, x := range in {
		if x.node == nil {
			continue
		}
		if len(x.history) == 0 || !fits[i].timed {
			grants[i] = 1 // not measured yet: its one unit
			held[x.node]++
			continue
		}
		if _, ok := byNode[x.node]; !ok {
			order = append(order, x.node)
		}
		byNode[x.node] = append(byNode[x.node], i)
	}
	for _, n := range order {
		idx := byNode[n]
		jobs := make([]alloc.Job, len(idx))
		for k, i := range idx {
			x := in[i]
			jobs[k] = alloc.Job{ID: x.j.id, History: x.history, Curve: fits[i].curve, Step: fits[i].step, UnitsNow: x.units,
				Priority: x.priority, Price: x.price, MaxUnits: x.nodeUnits, Remaining: math.Max(0, x.remaining)}
		}
		units := max(0, n.req.Units-held[n])
		got, err := alloc.Allocate(p, jobs, units, alloc.Options{Epoch: c.cfg.AllocEpoch.Seconds()})
		if err != nil {
			c.log.Warn("allocation failed; units unchanged", "node", n.req.Name, "err", err)
			for k, i := range idx {
				grants[i] = jobs[k].UnitsNow
			}
			continue
		}
		for k, i := range idx {
			grants[i] = max(1, got[k]) // a running job keeps a unit even on an oversubscribed node
		}
	}
	return grants
}

// applyEpoch records the fits, finishes the jobs at their target and gives
// the others their units. c.mu is held.
func (c *Coordinator) applyEpoch(in []allocInput, fits []jobFit, grants []int, took time.Duration, now time.Time) {
	at := now
	d := &c.alloc
	d.epochs++
	d.last = api.AllocStatus{Policy: c.cfg.AllocPolicy, EpochMS: c.cfg.AllocEpoch.Milliseconds(), At: &at,
		DecisionMS: float64(took.Microseconds()) / 1000, Jobs: []api.AllocGrant{}}
	d.last.Epochs = d.epochs
	for i, x := range in {
		j := x.j
		if j.state != api.JobRunning || j.alloc == nil || j.gen != x.gen {
			continue // ended or replaced meanwhile
		}
		f := fits[i]
		j.alloc.curve, j.alloc.quality = f.curve, f.quality
		if x.target > 0 && f.curve != nil && f.quality >= x.target {
			c.finish(j, api.JobDone, fmt.Sprintf("reached target loss reduction %g", x.target), now)
			continue
		}
		if grants == nil || x.node == nil {
			continue
		}
		d.last.Jobs = append(d.last.Jobs, api.AllocGrant{JobID: j.id, Node: x.node.req.Name, Units: grants[i], Was: x.units,
			Quality: f.quality})
		if grants[i] != x.units {
			c.setUnits(j, grants[i], now)
		}
	}
}

// setUnits gives j's one stage task u units and the CPU share u/N of its
// node, at a new generation. c.mu is held.
func (c *Coordinator) setUnits(j *job, u int, now time.Time) {
	t := j.managedTask()
	if t == nil {
		return
	}
	was := t.task.Units
	j.gen++
	t.task.Units, t.task.TaskCPUShare, t.task.Generation = u, t.node.taskShare(u), j.gen
	j.alloc.units, j.alloc.changedAt = u, now
	j.hourly += c.price(t.node.req.Type) * float64(u-was)
	c.log.Info("job units changed", "job", j.id, "node", t.node.req.Name, "units", u, "was", was, "generation", j.gen)
	c.save(j)
}

// taskShare is the CPU share of a task of u of n's units: all of it (no
// throttle) on a node that names GPUs, where a task's unit is a GPU of its
// own (its MaxUnits is one, see stageUnits).
func (n *node) taskShare(u int) float64 {
	if len(n.req.GPUDevices) > 0 {
		return 1
	}
	return taskShare(u, n.req.Units)
}

// taskShare is the CPU share of u of a node's n units.
func taskShare(u, n int) float64 {
	if n <= 0 || u >= n {
		return 1
	}
	return math.Max(api.MinCPUShare, float64(u)/float64(n))
}

// allocDecisions is the allocator's record across epochs.
type allocDecisions struct {
	epochs int64
	last   api.AllocStatus
}

// allocStatus answers GET /v1/alloc.
func (c *Coordinator) allocStatus() api.AllocStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.alloc.last
	s.Policy, s.EpochMS, s.Epochs = c.cfg.AllocPolicy, c.cfg.AllocEpoch.Milliseconds(), c.alloc.epochs
	s.Jobs = slices.Clone(s.Jobs)
	if s.Jobs == nil {
		s.Jobs = []api.AllocGrant{}
	}
	return s
}

func (c *Coordinator) handleAlloc(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, c.allocStatus(), nil)
}
