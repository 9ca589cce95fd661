package coord

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/store"
)

// Growing a stage in place: PATCH /v1/jobs/{id} with Add puts a new
// replica of a running single-stage BSP job that syncs through the
// parameter servers on each named node, without a restart. The new
// replica holds no state of its own (the servers keep every parameter and
// optimiser moment), so it needs only the step to join at and where its
// data starts:
//
//   - The step F is a few heartbeats of steps past the furthest any
//     replica has reported, so that every node has the change before any
//     replica reads F's input. The change is exact (api.Task.DataStart):
//     a replica that has read F's input already, or a PS shard that has
//     applied F, refuses it, goes on as it was and reports it late
//     (api.TaskReport.Late), and the coordinator calls the grow off.
//   - The data start is where the whole stage has got to at F: the
//     furthest any current replica's reader will be after the steps
//     before F, counted from where each reports its reader is
//     (api.TaskReport.Segment: a few heartbeats of steps to count). Every
//     member starts the new segment there, so no record is read twice and
//     none is skipped beyond the slower shards' few.
//
// The coordinator accepts a grow only once every replica reports the
// segment of the current make-up (an earlier change has reached them
// all), and no other change until every replica has reached F.

// growHeartbeats is how many heartbeat intervals of steps ahead of the
// furthest replica a new one joins, and minGrowSteps the fewest steps.
const (
	growHeartbeats = 3
	minGrowSteps   = 16
)

// growPlan is a grow decided under the coordinator's lock, to be applied
// by addReplicas once the data start is counted outside it.
type growPlan struct {
	gen      int64
	from     int64
	segments map[int]pipeline.Segment // each current replica's, by id
	nodes    []*node
	req      api.ResizeRequest
}

// grow applies a resize that adds replicas (req.Add) to job id's stage.
// It takes c.mu itself: the data start, up to maxGrowRecords records to
// count, is counted without it.
func (c *Coordinator) grow(id string, req api.ResizeRequest) (api.JobStatus, error) {
	c.mu.Lock()
	j, err := c.resizable(id, req)
	var g *growPlan
	if err == nil {
		g, err = c.planGrow(j, req)
	}
	c.mu.Unlock()
	if err != nil {
		return api.JobStatus{}, err
	}
	start, err := dataStart(g)
	if err != nil {
		return api.JobStatus{}, fmt.Errorf("grow job %s: %w", j.id, err)
	}
	c.mu.Lock()
	if j.gen != g.gen || j.state != api.JobRunning {
		c.mu.Unlock()
		return api.JobStatus{}, tryAgain("grow job %s: the job changed while its data start was counted", j.id)
	}
	c.addReplicas(j, g, start)
	return c.answerRecorded(j)
}

// planGrow checks that j can take req's new replicas now and on the named
// nodes, and picks the step they join at. c.mu is held.
func (c *Coordinator) planGrow(j *job, req api.ResizeRequest) (*growPlan, error) {
	conflict := func(format string, args ...any) (*growPlan, error) {
		return nil, httpErrorf(http.StatusConflict, "grow job %s: "+format, append([]any{j.id}, args...)...)
	}
	switch {
	case c.allocPolicy() != "":
		return conflict("the allocator (%s) gives jobs their units; it does not take replicas added by hand", c.allocPolicy())
	case syncsByAllreduce(j):
		return conflict("%s", allreduceMembersFixed)
	}
	if why := c.notReadyToGrow(j); why != "" {
		return nil, tryAgain("grow job %s: %s", j.id, why)
	}
	nodes, err := c.growNodes(j, req.Add)
	if err != nil {
		return nil, err
	}
	g := &growPlan{gen: j.gen, segments: map[int]pipeline.Segment{}, nodes: nodes, req: req}
	var furthest int64
	for _, t := range stageRuns(j) {
		s := t.report.Segment
		g.segments[t.task.Replica] = pipeline.Segment{From: s.From, Start: s.Start, Share: pipeline.Share{Members: s.Members, Batches: s.Batches},
			At: s.At, Position: s.Position}
		furthest = max(furthest, t.report.Step)
	}
	g.from = furthest + 1 + c.growMargin(j)
	if g.from > j.file.TotalSteps() {
		return conflict("it ends at step %d, before a new replica could join (step %d)", j.file.TotalSteps(), g.from)
	}
	for replica, seg := range g.segments {
		_, batch, _ := seg.Share.Of(replica)
		if seg.At > g.from || g.from-seg.At > maxGrowRecords/int64(max(batch, 1)) {
			return nil, tryAgain("grow job %s: replica %d reports its data position at step %d, %d steps from the step it would join at",
				j.id, replica, seg.At, g.from-seg.At)
		}
	}
	return g, nil
}

// maxGrowRecords bounds the records counted from a replica's reported
// position to the step a grow joins at (a fraction of a second), since a
// report is at most a few heartbeats old.
const maxGrowRecords = 1 << 26

// notReadyToGrow says why j's replicas do not all report the segment of
// the job's current make-up, or "". c.mu is held.
func (c *Coordinator) notReadyToGrow(j *job) string {
	members, batches := currentShare(j)
	for _, t := range stageRuns(j) {
		s := t.report.Segment
		switch {
		case s == nil:
			return fmt.Sprintf("replica %d has not reported its data position yet", t.task.Replica)
		case !slices.Equal(s.Members, members) || !slices.Equal(s.Batches, batches):
			return fmt.Sprintf("replica %d reports replicas %v with batches %v, not the job's latest %v with %v", t.task.Replica, s.Members, s.Batches, members, batches)
		}
	}
	return ""
}

// growMargin is the steps a new replica joins ahead of the furthest one:
// growHeartbeats heartbeat intervals, and one more for the reports' lag,
// at the stage's step rate: the faster of its recent pace and each
// replica's own average (which a stall or a larger batch since lowers),
// at least minGrowSteps. c.mu is held.
func (c *Coordinator) growMargin(j *job) int64 {
	steps := c.stepRate(j) * (growHeartbeats + 1) * c.cfg.HeartbeatInterval.Seconds()
	return max(minGrowSteps, int64(math.Ceil(steps)))
}

// stepRate is j's stage's steps a second: the faster of its recent pace
// and each replica's own average (which a stall or a larger batch since
// lowers). c.mu is held.
func (c *Coordinator) stepRate(j *job) float64 {
	rate := j.pace.rate()
	for _, t := range stageRuns(j) {
		if t.report.Batch > 0 {
			rate = max(rate, t.report.SamplesPerS/float64(t.report.Batch))
		}
	}
	return rate
}

// stepPace follows how fast a job's stage advances: the furthest step
// its replicas have reported and when, over its latest paceSamples
// advances.
type stepPace struct {
	steps []int64
	times []time.Time
}

const paceSamples = 8

// observe records that a replica reported step at now.
func (p *stepPace) observe(step int64, now time.Time) {
	if n := len(p.steps); n > 0 && step <= p.steps[n-1] {
		return
	}
	p.steps, p.times = append(p.steps, step), append(p.times, now)
	if len(p.steps) > paceSamples {
		p.steps, p.times = p.steps[1:], p.times[1:]
	}
}

// rate is the steps a second over the recorded advances; 0 with fewer
// than two.
func (p *stepPace) rate() float64 {
	n := len(p.steps)
	if n < 2 {
		return 0
	}
	d := p.times[n-1].Sub(p.times[0]).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(p.steps[n-1]-p.steps[0]) / d
}

// growNodes looks up the nodes new replicas go on: live, in service, of
// the stage's type, hosting no stage of another running job nor of j.
// c.mu is held.
func (c *Coordinator) growNodes(j *job, add []api.NewReplica) ([]*node, error) {
	stageType := j.plan.Stages[0].Type
	cl := c.cluster(j, false)
	var nodes []*node
	for _, a := range add {
		n := c.latestNamed(a.Node)
		why := ""
		switch {
		case n == nil:
			return nil, httpErrorf(http.StatusNotFound, "grow job %s: no node %q", j.id, a.Node)
		case !n.alive():
			why = "is dead"
		case c.draining(n):
			why = "is draining"
		case n.req.Type != stageType:
			why = fmt.Sprintf("is of type %s; the stage runs on %s", n.req.Type, stageType)
		case cl.busy[n]:
			why = "hosts a stage of another running job"
		case slices.ContainsFunc(stageRuns(j), func(t *taskRun) bool { return t.node == n }):
			why = "hosts a replica of this job already"
		}
		if why != "" {
			return nil, httpErrorf(http.StatusConflict, "grow job %s: node %s %s", j.id, a.Node, why)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// dataStart is the record the stage has reached at g.from: the furthest
// any current replica's reader will be after the steps before it,
// counted from where each one reports it is.
func dataStart(g *growPlan) (int64, error) {
	base := data.Options{Split: data.SplitTrain}
	start := int64(1) // > 0: the change is exact
	for replica, seg := range g.segments {
		p, err := seg.PositionAt(base, replica, g.from)
		if err != nil {
			return 0, fmt.Errorf("replica %d's data position: %w", replica, err)
		}
		start = max(start, p)
	}
	return start, nil
}

// addReplicas gives j's stage the replicas of g from step g.from, with
// data from record start: the kept replicas with the batches asked, then
// one new task per node, ids above every current one. c.mu is held.
func (c *Coordinator) addReplicas(j *job, g *growPlan, start int64) {
	next := idsAbove(j)
	raiseIDBound(j, next+len(g.nodes))
	runs := stageRuns(j)
	model := runs[0].task // with the new bound
	members, batches := slices.Clone(g.req.Replicas), slices.Clone(g.req.Batches)
	units := 0
	for i, n := range g.nodes {
		t := model
		t.Replica, t.Units, t.Batch = next+i, n.stageUnits(), g.req.Add[i].Batch
		t.TaskID = fmt.Sprintf("%s.s0.r%d", j.id, t.Replica)
		t.FirstStep, t.RestoreDir = g.from-1, ""
		j.tasks = append(j.tasks, &taskRun{job: j, task: t, node: n, nodeName: n.req.Name,
			report: api.TaskReport{TaskID: t.TaskID, State: api.TaskRunning, Step: g.from - 1}})
		members, batches = append(members, t.Replica), append(batches, t.Batch)
		units += t.Units
	}
	for _, t := range runs {
		if slices.Contains(members, t.task.Replica) {
			units += t.task.Units
		}
	}
	c.planOnUnits(j, units, "")
	c.changeMembers(j, members, batches, g.from, start)
	reshapeBalance(j) // the new tasks were in j.tasks already: changeMembers saw no new member
	c.log.Info("job grown", "job", j.id, "replicas", members, "batches", batches, "from_step", g.from,
		"data_start", start, "generation", j.gen)
}

// idsAbove is the first replica id above every id j's stage has had:
// each task's Replicas bounds them, and grows with every grow
// (raiseIDBound), so a replica that left, its node perhaps only cut off,
// never shares an id with one that joins.
func idsAbove(j *job) int {
	next := 0
	for _, t := range j.tasks {
		next = max(next, t.task.Replicas, t.task.Replica+1)
		if len(t.task.Layout) > 0 {
			next = max(next, t.task.Layout[0].Replicas)
		}
	}
	return next
}

// raiseIDBound makes bound the replica-id bound every task of j carries
// (Replicas, and its layout's, which a stage task checks against its own).
// c.mu is held.
func raiseIDBound(j *job, bound int) {
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage {
			t.task.Replicas = bound
		}
		if len(t.task.Layout) > 0 {
			t.task.Layout = slices.Clone(t.task.Layout)
			t.task.Layout[0].Replicas = bound
		}
	}
}

// planOnUnits makes j's plan one of units units, after a grow, a shrink
// or a grow called off: the stage's and the plan's predicted throughput
// are the cost model's for them, and a job that ran below its
// throughput_limit no longer says so once they reach it. After, unless
// empty, says what took units away ("node n died", "a grow was called
// off"): a job with a limit that the units are predicted to fall short of,
// or whose prediction fails, then says in its reason that it runs below
// its limit, and planOnUnits reports so. c.mu is held.
func (c *Coordinator) planOnUnits(j *job, units int, after string) (below bool) {
	planned := j.plan.Stages[0].Units
	plan := *j.plan
	plan.Stages = slices.Clone(plan.Stages)
	plan.Stages[0].Units = units
	x, err := c.stageThroughputOn(j, c.cfg.Catalog, plan.Stages[0], units)
	if err != nil {
		c.log.Warn("predicting a resized stage's throughput", "job", j.id, "err", err)
	} else {
		plan.Stages[0].Throughput, plan.Throughput = x, x
	}
	c.setPlan(j, &plan)
	limit := c.planFile(j).ThroughputLimit
	switch {
	case err != nil && after != "" && limit > anyThroughput:
		j.reason = fmt.Sprintf("%s: %d of its %d units left after %s", shrunkBelow, units, planned, after)
		return true
	case err != nil:
	case x >= limit:
		if runsBelowLimit(j) {
			j.reason = "" // back up at its limit
		}
	case after != "" && limit > anyThroughput:
		j.reason = fmt.Sprintf("%s: %d of its %d units left after %s, predicted %.6g of %.6g samples/s",
			shrunkBelow, units, planned, after, x, limit)
		return true
	}
	return false
}

// joinStep is the step the replicas of j's latest grow join at, or 0
// when its latest change was no grow: an exact change (DataStart) is a
// grow's, and every later change is not. Derived from the tasks, it
// outlives a coordinator restart with them. c.mu is held.
func (j *job) joinStep() int64 {
	for _, t := range stageRuns(j) {
		if t.task.DataStart > 0 {
			return t.task.FromStep
		}
	}
	return 0
}

// joining reports whether replicas added to j have yet to reach the step
// they join at: until then no other change may reach the job, since the
// one in flight is exact. c.mu is held.
func (j *job) joining() bool {
	from := j.joinStep()
	return from > 0 && slices.ContainsFunc(stageRuns(j), func(t *taskRun) bool { return t.report.Step < from })
}

// callOffGrow drops the replicas still joining j, for why: the job goes
// on as before the grow rather than failing or waiting for replicas that
// trained nothing. A joining replica's failure makes its node, suspect,
// suspect to the job as to a restart, so that moving back up does not pick
// it again at once. It reports whether it did. c.mu is held.
func (c *Coordinator) callOffGrow(j *job, why string, suspect *node, now time.Time) bool {
	var left []*taskRun
	units := 0
	for _, t := range stageRuns(j) {
		if !j.joins(t) {
			left, units = append(left, t), units+t.task.Units
		}
	}
	members, batches, ok := splitOver(j, left)
	if !ok || canResize(j) != "" {
		return false
	}
	if suspect != nil {
		j.suspects = append(j.suspects, store.Suspect{Node: suspect.req.Name, Until: now.Add(c.cfg.SuspectFor)})
	}
	// The plan the grow made is not what runs.
	if c.planOnUnits(j, units, "a grow was called off") && j.growRetries < maxGrowRetries {
		j.growRetries++
		j.retryGrow = true // as for a grow refused for now: the node that came may stay the last change
	}
	from := c.resize(j, members, batches) // not exact: the grow is called off; records the job, its plan included
	c.log.Warn("grow called off", "job", j.id, "why", why, "replicas", members, "batches", batches, "from_step", from)
	return true
}

// lateForGrow reports whether r says its task could not take j's grow
// in flight at its step (api.TaskReport.Late). c.mu is held.
func lateForGrow(j *job, r api.TaskReport) bool {
	return r.Late > 0 && r.Late == j.gen && j.joining()
}

// joins reports whether t is a replica a grow added that has not reached
// the step it joins at. c.mu is held.
func (j *job) joins(t *taskRun) bool {
	from := j.joinStep()
	return from > 0 && t.task.Role == api.RoleStage && t.task.FirstStep >= from-1 && t.report.Step < from
}

// stageRuns lists j's stage tasks (of its one stage, for a resize) by
// replica id, ascending: the order members are given in.
func stageRuns(j *job) []*taskRun {
	var out []*taskRun
	for _, t := range j.tasks {
		if t.task.Role == api.RoleStage {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *taskRun) int { return a.task.Replica - b.task.Replica })
	return out
}

// currentShare is the replica ids of j's stage, ascending, and their
// batches: what its replicas run now.
func currentShare(j *job) (members, batches []int) {
	for _, t := range stageRuns(j) {
		members, batches = append(members, t.task.Replica), append(batches, t.task.Batch)
	}
	return members, batches
}
