package coord

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// Re-planning from measured throughput: HeterPS' Algorithm 1, where the
// scheduler refines its plan with the throughput the running plan reaches.
// For a job whose file enables [replan], every tick of the restarter:
//
//   - measure: once the job has trained replan.warmup steps since its
//     placement, each stage's measured throughput (its replicas' batch over
//     compute seconds per step, or their samples/s) is compared with the
//     throughput the uncorrected profile (the catalog's roofline estimate)
//     predicts for that stage; measured time / predicted time is a sample of
//     the stage's type's scale factor, folded into an EMA per type
//     (replan.smoothing; the first sample seeds it). A type that ran no
//     stage keeps its factor (1 until measured).
//   - decide, at each new complete checkpoint: the problem the job was
//     planned on, with every layer's oct and odt on each type multiplied by
//     that type's factor, is planned with exact on the units the job holds
//     plus the free ones. Keeping the current plan costs the rest of the
//     run, step to the end, at its corrected cost per sample; moving costs
//     the new plan's from the checkpoint (the steps after it are trained
//     again) plus the start-up of the move at the new plan's price (the
//     mean time from the chain's earlier restarts, moves or not, to their
//     first step, else replan.move_seconds).
//     The job moves when that is cheaper by more than replan.gain.
//   - move: a single-stage BSP job whose new plan only has fewer units of
//     the same type, reachable by dropping whole replicas, is resized in
//     place (elastic.go), losing nothing; anything else restarts from the
//     checkpoint (restart.go: a new job of the chain, in the same queue
//     place, not counted against checkpoint.restarts), and the restarted
//     job is planned with exact on the corrected problem.
//
// The factors correct the profile per type, not per layer: a descriptor
// wrong by a factor (peak FLOP/s, bandwidths) is corrected exactly, a
// layer-dependent error (fixed overheads, one kernel slower than the
// roofline) only on average over the layers that ran. The measured compute
// seconds leave out waiting for partners, so a transfer-bound stage looks
// faster than its ET. The state lives in the coordinator's memory: a
// restarted coordinator starts the factors again from 1. Under an
// allocation policy (alloc.go) the allocator owns the jobs' units and
// nothing is re-planned.

// maxReplanRecords caps the evaluations a chain's status lists (the newest).
const maxReplanRecords = 32

// Moves.
const (
	moveNone    = "none"
	moveRestart = "restart"
	moveResize  = "resize"
)

// replanState is what the re-planner knows of a job's restart chain; a
// restart hands a copy on (handOn).
type replanState struct {
	scales  map[string]float64 // type -> measured time / predicted time
	samples int
	records []api.Replan
	// spent is the measured cost of the chain's earlier jobs; firstTotal
	// the first plan's predicted cost of the whole run.
	spent      float64
	firstTotal float64
	// moveSeconds is the mean measured start-up of the chain's restarts
	// (0: none measured), moves how many it averages; movedAt is when the
	// restart that started this job was made, until its first step.
	moveSeconds float64
	moves       int
	movedAt     time.Time
	moving      bool // the job restarts to move

	// Of the current job and placement (generation gen): the uncorrected
	// predicted throughput of each stage, the step warm-up counts from,
	// the step of the last sample, the newest checkpoint evaluated.
	gen     int64
	raw     []float64
	since   int64
	sampled int64
	checked int64
}

// ensureReplan gives a running job with [replan] enabled its state, the
// first plan's cost noted. c.mu is held.
func (c *Coordinator) ensureReplan(j *job) *replanState {
	if j.replan == nil {
		j.replan = &replanState{scales: map[string]float64{}, firstTotal: j.plan.Cost}
	}
	return j.replan
}

// handOn is the state a restart of old starts with: the factors and the
// records, old's measured cost added. Its start-up is timed from now.
// c.mu is held.
func (r *replanState) handOn(old *job, now time.Time) *replanState {
	if r == nil {
		return nil
	}
	n := &replanState{scales: maps.Clone(r.scales), samples: r.samples, records: slices.Clone(r.records),
		spent: r.spent, firstTotal: r.firstTotal, moveSeconds: r.moveSeconds, moves: r.moves, gen: -1}
	if !old.started.IsZero() {
		n.spent += old.hourly * now.Sub(old.started).Hours()
	}
	n.movedAt = now
	return n
}

// record is what a job's record keeps of r (nil for nil).
func (r *replanState) record() *store.Replan {
	if r == nil {
		return nil
	}
	return &store.Replan{Scales: maps.Clone(r.scales), Samples: r.samples, Records: slices.Clone(r.records), Spent: r.spent,
		FirstTotal: r.firstTotal, MoveSeconds: r.moveSeconds, Moves: r.moves, Moving: r.moving}
}

// replanFromRecord takes up a job record's re-planning (nil for nil). Its
// placement's figures start again (gen -1): warm-up counts from the
// reports after the coordinator's restart.
func replanFromRecord(r *store.Replan) (*replanState, error) {
	if r == nil {
		return nil, nil
	}
	for typ, scale := range r.Scales {
		if !(scale > 0) || math.IsInf(scale, 0) {
			return nil, fmt.Errorf("type %s: scale %g, want a positive finite factor", typ, scale)
		}
	}
	for _, v := range []float64{r.Spent, r.FirstTotal, r.MoveSeconds} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("spent %g, first plan %g, move seconds %g: want finite and >= 0", r.Spent, r.FirstTotal, r.MoveSeconds)
		}
	}
	switch {
	case r.Samples < 0 || r.Moves < 0:
		return nil, fmt.Errorf("%d samples, %d moves: counts cannot be negative", r.Samples, r.Moves)
	case len(r.Records) > maxReplanRecords:
		return nil, fmt.Errorf("%d decisions, at most %d are kept", len(r.Records), maxReplanRecords)
	}
	scales := r.Scales
	if scales == nil {
		scales = map[string]float64{}
	}
	return &replanState{scales: scales, samples: r.Samples, records: r.Records, spent: r.Spent, firstTotal: r.FirstTotal,
		moveSeconds: r.MoveSeconds, moves: r.Moves, moving: r.Moving, gen: -1}, nil
}

// isMoving reports whether the job restarts to move to a better plan.
func (r *replanState) isMoving() bool { return r != nil && r.moving }

// correct multiplies p's layer times on each type by its scale factor.
// It reports whether any factor applied.
func (r *replanState) correct(p *sched.Problem) bool {
	if r == nil || len(r.scales) == 0 {
		return false
	}
	for t, typ := range p.Types {
		s, ok := r.scales[typ.Name]
		if !ok {
			continue
		}
		for l := range p.Layers {
			p.Layers[l].OCT[t] *= s
			p.Layers[l].ODT[t] *= s
		}
	}
	return true
}

// measuredStages is the job's step (the fewest steps any stage replica
// completed) and each stage's measured throughput; ok is false until
// every stage replica has reported a rate. c.mu is held.
func measuredStages(j *job) (step int64, x []float64, ok bool) {
	step, ok = j.file.TotalSteps(), true
	x = make([]float64, len(j.plan.Stages))
	byStep := make([]float64, len(j.plan.Stages))
	timed := make([]bool, len(j.plan.Stages))
	for i := range timed {
		timed[i] = true
	}
	for _, t := range j.tasks {
		if t.task.Role != api.RoleStage || t.task.Stage >= len(x) {
			continue
		}
		rep := t.report
		step = min(step, max(rep.Step, j.firstStep()))
		if rep.TaskID == "" || rep.SamplesPerS <= 0 {
			ok = false
		}
		x[t.task.Stage] += rep.SamplesPerS
		if rep.StepSeconds > 0 && rep.Batch > 0 {
			byStep[t.task.Stage] += float64(rep.Batch) / rep.StepSeconds
		} else {
			timed[t.task.Stage] = false
		}
	}
	for i := range x {
		if timed[i] && byStep[i] > 0 {
			x[i] = byStep[i] // compute only: a pipeline's fast stage is not held to the slow one's pace
		}
	}
	return step, x, ok
}

// measureReplan folds the job's latest reports into the scale factors.
// c.mu is held.
func (c *Coordinator) measureReplan(j *job, now time.Time) {
	r := c.ensureReplan(j)
	step, x, ok := measuredStages(j)
	if r.gen != j.gen {
		r.gen, r.raw, r.since, r.sampled = j.gen, nil, step, step
	}
	if !r.movedAt.IsZero() && step > j.firstStep() {
		r.moveSeconds = (r.moveSeconds*float64(r.moves) + now.Sub(r.movedAt).Seconds()) / float64(r.moves+1)
		r.moves++
		r.movedAt = time.Time{}
	}
	if !ok || step < r.since+j.file.Replan.Warmup || step <= r.sampled {
		return
	}
	if r.raw == nil {
		raw, err := c.rawThroughputs(j)
		if err != nil {
			c.log.Warn("re-planning: predicting the stages' throughput", "job", j.id, "err", err)
			return
		}
		r.raw = raw
	}
	sum, n := map[string]float64{}, map[string]int{}
	for i, s := range j.plan.Stages {
		if x[i] > 0 && r.raw[i] > 0 {
			sum[s.Type] += r.raw[i] / x[i]
			n[s.Type]++
		}
	}
	w := j.file.Replan.Smoothing
	for typ, total := range sum {
		sample := total / float64(n[typ])
		if old, seen := r.scales[typ]; seen {
			sample = (1-w)*old + w*sample
		}
		r.scales[typ] = sample
	}
	r.samples++
	r.sampled = step
}

// rawThroughputs is each stage's throughput as the uncorrected profile
// predicts it. c.mu is held.
func (c *Coordinator) rawThroughputs(j *job) ([]float64, error) {
	p, _, err := jobProblem(c.planFile(j), j.model, onlyTypes(c.cfg.Catalog, planTypes(j.plan)), c.storedProfiles(j.model.Name))
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(j.plan.Stages))
	for i, s := range j.plan.Stages {
		t, ok := p.TypeIndex(s.Type)
		if !ok {
			return nil, fmt.Errorf("stage %d: type %s is not in the catalog", i, s.Type)
		}
		out[i] = p.StageThroughput(sched.Segment{First: s.First, Last: s.Last, Type: t, Units: s.Units})
	}
	return out, nil
}

// replanInput is what deciding a move needs, copied out under c.mu.
type replanInput struct {
	j        *job
	gen      int64
	file     *config.Job
	model    *config.Model
	cat      *config.Catalog
	stored   profileSet // the model's stored profiles
	cur      *sched.Plan
	scales   map[string]float64
	step     int64 // where the job is
	from     int64 // the checkpoint a restart restores
	total    int64
	moveS    float64
	replicas []replica // a single-stage BSP job's stage replicas (node nil), for resizing in place
	members  []int     // their replica ids
}

// replanDue returns what deciding j's move needs when j has a checkpoint
// it has not been evaluated at, and is measured and warmed up. c.mu is
// held.
func (c *Coordinator) replanDue(j *job) (replanInput, bool) {
	r := j.replan
	cp := j.ckpt.latest
	step, _, _ := measuredStages(j)
	if r == nil || cp == nil || cp.Step <= r.checked || r.samples == 0 || r.gen != j.gen || j.joining() ||
		step < r.since+j.file.Replan.Warmup || cp.Step >= j.file.TotalSteps() {
		return replanInput{}, false
	}
	r.checked = cp.Step
	in := replanInput{j: j, gen: j.gen, file: c.planFile(j), model: j.model, stored: c.storedProfiles(j.model.Name), cur: j.plan, scales: maps.Clone(r.scales),
		step: step, from: cp.Step, total: j.file.TotalSteps(), moveS: j.file.Replan.MoveSeconds}
	if r.moves > 0 {
		in.moveS = r.moveSeconds
	}
	in.cat = c.replanCatalog(j)
	if canResize(j) == "" && !syncsByAllreduce(j) { // an allreduce ring keeps its members: it moves by restart
		for _, t := range j.tasks {
			if t.task.Role == api.RoleStage {
				in.replicas = append(in.replicas, replica{units: t.task.Units})
				in.members = append(in.members, t.task.Replica)
			}
		}
	}
	return in, true
}

// replanDecision is the outcome of evaluating a job at a checkpoint.
type replanDecision struct {
	rec     api.Replan
	plan    *sched.Plan
	members []int // resize: the replicas kept
	batches []int
}

// decideReplan is decideReplan with a panic turned into its error
// (contain.go).
func (c *Coordinator) decideReplan(ctx context.Context, in replanInput) (_ *replanDecision, err error) {
	defer c.recoverInto(&err, in.j.id, "re-planning")
	return decideReplan(ctx, in)
}

// decideReplan plans the corrected problem with exact and prices keeping
// the current plan against moving to the new one. It runs without c.mu.
func decideReplan(ctx context.Context, in replanInput) (*replanDecision, error) {
	p, src, err := jobProblem(in.file, in.model, in.cat, in.stored)
	if err != nil {
		return nil, err
	}
	(&replanState{scales: in.scales}).correct(p)
	cur, err := sched.Recost(in.cur, p)
	if err != nil {
		return nil, fmt.Errorf("re-costing the current plan: %w", err)
	}
	plan, err := sched.Run(ctx, "exact", p, sched.Options{Seed: in.file.Seed})
	if err != nil {
		return nil, fmt.Errorf("planning the corrected problem: %w", err)
	}
	plan.Sources = src.types
	runSamples := p.Epochs * p.Samples
	batch := float64(in.file.Batch)
	d := &replanDecision{plan: plan, rec: api.Replan{Job: in.j.id, Step: in.step, FromStep: in.from, Scales: in.scales,
		OldCost: cur.Cost / runSamples * float64(in.total-in.step) * batch, Move: moveNone,
		OldAssign: in.cur.Assign, OldUnits: stageUnits(in.cur)}}
	if !plan.Feasible {
		d.rec.NewCost, d.rec.NewAssign, d.rec.NewUnits = d.rec.OldCost, in.cur.Assign, d.rec.OldUnits
		return d, nil
	}
	d.rec.NewAssign, d.rec.NewUnits = plan.Assign, stageUnits(plan)
	perSample := plan.Cost / runSamples
	if members, batches, ok := resizeInPlace(in, plan); ok {
		d.members, d.batches = members, batches
		d.rec.NewCost, d.rec.FromStep = perSample*float64(in.total-in.step)*batch, in.step
		d.rec.Move = moveResize
	} else {
		hourly := plan.Cost * 3600 / plan.TimeS
		d.rec.NewCost = perSample*float64(in.total-in.from)*batch + in.moveS*hourly/3600
		d.rec.Move = moveRestart
	}
	if d.rec.OldCost > 0 {
		d.rec.Gain = (d.rec.OldCost - d.rec.NewCost) / d.rec.OldCost
	}
	if samePlan(in.cur, plan) || d.rec.Gain <= in.file.Replan.Gain {
		d.rec.Move = moveNone
	}
	return d, nil
}

// sameDecision reports whether two evaluations advised the same: no move
// to the same plan.
func sameDecision(a, b api.Replan) bool {
	return a.Move == b.Move && slices.Equal(a.NewAssign, b.NewAssign) && slices.Equal(a.NewUnits, b.NewUnits)
}

func stageUnits(p *sched.Plan) []int {
	out := make([]int, len(p.Stages))
	for i, s := range p.Stages {
		out[i] = s.Units
	}
	return out
}

func samePlan(a, b *sched.Plan) bool {
	return slices.Equal(a.Assign, b.Assign) && slices.Equal(stageUnits(a), stageUnits(b)) && a.PSCores == b.PSCores
}

// resizeInPlace finds the replicas of a single-stage BSP job to keep when
// the new plan is the same stage with fewer units that whole replicas add
// up to, and their batches.
func resizeInPlace(in replanInput, plan *sched.Plan) (members, batches []int, ok bool) {
	if len(in.replicas) == 0 || len(plan.Stages) != 1 || !slices.Equal(in.cur.Assign, plan.Assign) ||
		plan.PSCores != in.cur.PSCores || plan.Stages[0].Units >= in.cur.Stages[0].Units {
		return nil, nil, false
	}
	keep := unitSubset(in.replicas, plan.Stages[0].Units)
	if keep == nil {
		return nil, nil, false
	}
	reps := make([]replica, len(keep))
	for i, k := range keep {
		reps[i] = in.replicas[k]
		members = append(members, in.members[k])
	}
	if splitBatch(0, in.file.Batch, reps) != nil {
		return nil, nil, false
	}
	for _, r := range reps {
		batches = append(batches, r.batch)
	}
	return members, batches, true
}

// unitSubset is the indices of a subset of reps whose units add up to
// want (the first found, in index order), nil if none. Replica counts
// are small: the search is exhaustive up to 16 replicas.
func unitSubset(reps []replica, want int) []int {
	n := min(len(reps), 16)
	for mask := 1; mask < 1<<n; mask++ {
		sum := 0
		var idx []int
		for k := range n {
			if mask&(1<<k) != 0 {
				sum += reps[k].units
				idx = append(idx, k)
			}
		}
		if sum == want {
			return idx
		}
	}
	return nil
}

// replanTick measures every running job with [replan] enabled and
// evaluates those at a new checkpoint, planning without c.mu.
func (c *Coordinator) replanTick(ctx context.Context, now time.Time) {
	if c.allocPolicy() != "" {
		return
	}
	c.mu.Lock()
	var due []replanInput
	for _, j := range c.jobs {
		if j.state != api.JobRunning || !j.file.Replan.Enabled || j.plan == nil {
			continue
		}
		c.measureReplan(j, now)
		if in, ok := c.replanDue(j); ok {
			due = append(due, in)
		}
	}
	c.mu.Unlock()
	for _, in := range due {
		pctx, stop := context.WithTimeout(ctx, c.cfg.PlanTimeout)
		d, err := c.decideReplan(pctx, in)
		stop()
		c.mu.Lock()
		c.applyReplan(in, d, err, time.Now())
		c.mu.Unlock()
	}
}

// applyReplan records an evaluation and moves the job if it decided to,
// unless the job changed meanwhile. c.mu is held.
func (c *Coordinator) applyReplan(in replanInput, d *replanDecision, err error, now time.Time) {
	j := in.j
	if err != nil {
		c.log.Warn("re-planning failed", "job", j.id, "step", in.step, "err", err)
		return
	}
	if j.state != api.JobRunning || j.gen != in.gen || j.replan == nil {
		return
	}
	r := j.replan
	d.rec.Time = now
	if d.rec.Move == moveNone && samePlan(in.cur, d.plan) {
		return // nothing to report: the corrected problem confirms the plan
	}
	if n := len(r.records); n > 0 && d.rec.Move == moveNone && sameDecision(r.records[n-1], d.rec) {
		r.records[n-1] = d.rec // the same advice again: the newest figures, not another line
		return
	}
	r.records = append(r.records, d.rec)
	if len(r.records) > maxReplanRecords {
		r.records = slices.Delete(r.records, 0, len(r.records)-maxReplanRecords)
	}
	c.log.Info("re-planned", "job", j.id, "step", in.step, "move", d.rec.Move, "gain", d.rec.Gain,
		"old_cost", d.rec.OldCost, "new_cost", d.rec.NewCost, "scales", d.rec.Scales, "assign", d.plan.Assign)
	switch d.rec.Move {
	case moveNone:
		c.save(j) // the advice, in its status after a restart of the coordinator too
	case moveResize:
		c.resize(j, d.members, d.batches)
		c.setPlan(j, d.plan)
	case moveRestart:
		c.restartToMove(j, d, now)
	}
}

// restartToMove restarts j from its newest checkpoint to run the
// corrected problem's plan. Like a kill-restart resize (batchrestart.go)
// it is no failure: it waits no backoff and avoids no node. c.mu is held.
func (c *Coordinator) restartToMove(j *job, d *replanDecision, now time.Time) {
	j.replan.moving = true
	c.startMove(j, fmt.Sprintf("re-planning: moving to %v units %v from the checkpoint of step %d (predicted gain %.1f%%)",
		d.plan.Assign, stageUnits(d.plan), d.rec.FromStep, 100*d.rec.Gain), now)
}

// replanRestarted notes the job a move restarted old as, and where from.
// c.mu is held.
func replanRestarted(old, j *job) {
	r := j.replan
	if r == nil || !old.replan.isMoving() || len(r.records) == 0 {
		return
	}
	last := &r.records[len(r.records)-1]
	last.NewJob = j.id
	last.FromStep = j.firstStep()
	old.replan.records = slices.Clone(r.records)
}

// replanStatus is the re-planner's view of j for its status. c.mu is
// held.
func replanStatus(j *job, costSoFar float64) *api.ReplanStatus {
	r := j.replan
	if r == nil {
		return nil
	}
	s := &api.ReplanStatus{Scales: maps.Clone(r.scales), Samples: r.samples, Replans: slices.Clone(r.records),
		MeasuredCost: r.spent + costSoFar, FirstPlanTotal: r.firstTotal, MoveSeconds: j.file.Replan.MoveSeconds}
	if r.moves > 0 {
		s.MoveSeconds = r.moveSeconds
	}
	if s.Replans == nil {
		s.Replans = []api.Replan{}
	}
	if j.plan != nil && len(j.tasks) > 0 {
		step, _, _ := measuredStages(j)
		s.FirstPlanCost = r.firstTotal * float64(step) / float64(j.file.TotalSteps())
	}
	return s
}
