package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// The queue. Jobs are placed one at a time in queue order (submission
// order; a restart keeps its original's place), each planned on the units
// that live nodes offer and that no running job holds. A job that cannot
// be placed now but that the catalog's cluster could host waits, queued,
// at the head of the queue — jobs behind it wait too, so that jobs start
// in the order they came — and is tried again whenever a node registers or
// dies or a job ends. A job that no cluster the catalog allows could host
// fails with the planner's reason.

// planLoop places waiting jobs until ctx ends.
func (c *Coordinator) planLoop(ctx context.Context) {
	tick := time.NewTicker(c.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-tick.C:
		}
		c.placeQueue(ctx)
	}
}

// placeQueue places waiting jobs in queue order until one has to wait.
func (c *Coordinator) placeQueue(ctx context.Context) {
	for ctx.Err() == nil {
		j := c.head()
		if j == nil || !c.planAndPlace(ctx, j) {
			return
		}
	}
}

// head is the first waiting job in queue order, unless it already failed
// to be placed on the cluster as it still is.
func (c *Coordinator) head() *job {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first *job
	for _, j := range c.jobs {
		if j.waiting() && (first == nil || j.seq < first.seq) {
			first = j
		}
	}
	if first == nil || (first.state == api.JobQueued && first.triedAt == c.changes) {
		return nil
	}
	return first
}

// queuePosition is j's 1-based place among the waiting jobs. c.mu is held.
func (c *Coordinator) queuePosition(j *job) int {
	pos := 1
	for _, o := range c.jobs {
		if o != j && o.waiting() && o.seq < j.seq {
			pos++
		}
	}
	return pos
}

// planAndPlace tries to start j and reports whether j left the queue
// (started, failed or cancelled meanwhile).
func (c *Coordinator) planAndPlace(ctx context.Context, j *job) bool {
	c.mu.Lock()
	if !j.waiting() {
		c.mu.Unlock()
		return true
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	waitedBefore := j.state == api.JobQueued
	j.state, j.stopPlan = api.JobPlanning, stop
	changes := c.changes
	cl := c.cluster(j, true)
	all := cl
	if len(j.suspects) > 0 {
		all = c.cluster(j, false)
	}
	verified := j.verified
	c.mu.Unlock()

	var err error
	if !verified {
		err = c.verifyRestore(j) // hashing a large checkpoint takes as long as reading it: not part of PlanTimeout
	}
	ctx, stopTimer := context.WithTimeout(ctx, c.cfg.PlanTimeout)
	defer stopTimer()
	var plan *sched.Plan
	free := liveCatalog(c.cfg.Catalog, cl.free())
	if err == nil {
		plan, err = c.plan(ctx, j, free)
	}
	if err == nil && !plan.Feasible && len(all.live) > len(cl.live) {
		// Avoiding the nodes that failed the job is a preference: better
		// one of them than waiting until the suspicion expires.
		cl = all
		free = liveCatalog(c.cfg.Catalog, cl.free())
		plan, err = c.plan(ctx, j, free)
	}
	below := 0.0 // the throughput_limit a restart's plan falls short of
	if err == nil && !plan.Feasible && j.restartOf != "" {
		plan, below = c.planBelowLimit(ctx, j, free, plan)
	}
	var possible *sched.Plan
	switch {
	case err != nil || plan.Feasible || j.possible != 0:
	case j.file.ThroughputLimit == 0:
		j.possible = 1 // a floor derived from the free units adapts to them
	default:
		possible, err = c.plan(ctx, j, c.cfg.Catalog)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	j.stopPlan = nil
	now := time.Now()
	if j.state != api.JobPlanning { // cancelled while planning
		return true
	}
	j.verified = j.verified || (err == nil && !verified)
	if err != nil {
		c.finish(j, api.JobFailed, fmt.Sprintf("planning: %v", err), now)
		return true
	}
	if possible != nil {
		j.possible = -1
		if possible.Feasible {
			j.possible = 1
		}
	}
	if plan.Feasible {
		c.setPlan(j, plan)
		pl, err := place(plan, j.file.Batch, cl, c.plainDataPlane())
		if err == nil {
			c.start(j, pl, now)
			if below > 0 {
				j.reason = fmt.Sprintf("%s: the free live nodes reach %.6g of %.6g samples/s", belowLimit, plan.Throughput, below)
				c.log.Warn("job runs below its throughput_limit", "job", j.id, "planned", plan.Throughput, "limit", below)
				c.save(j)
			}
			return true
		}
		if errors.As(err, new(neverPlaceable)) {
			c.finish(j, api.JobFailed, fmt.Sprintf("the cluster cannot host the plan: %v", err), now)
			return true
		}
		return c.wait(j, fmt.Sprintf("the live nodes cannot host the plan yet: %v%s", err, c.drainingNote()), changes, waitedBefore)
	}
	if j.possible < 0 {
		c.setPlan(j, possible)
		c.finish(j, api.JobFailed, fmt.Sprintf("no feasible plan (method %s) even with every unit of the catalog: %s", possible.Method, possible.Reason), now)
		return true
	}
	return c.wait(j, fmt.Sprintf("waiting for units: no feasible plan on the free live nodes (%s)%s", plan.Reason, c.drainingNote()), changes, waitedBefore)
}

// wait leaves j queued with the reason. c.mu is held.
func (c *Coordinator) wait(j *job, reason string, changes uint64, waitedBefore bool) bool {
	j.state, j.reason, j.triedAt = api.JobQueued, reason, changes
	if !waitedBefore {
		c.log.Info("job queued", "job", j.id, "reason", reason)
		c.save(j)
	}
	return false
}

func (c *Coordinator) setPlan(j *job, plan *sched.Plan) {
	j.plan = plan
	j.planJSON, _ = json.Marshal(plan) // plans hold finite numbers and strings
}

func (c *Coordinator) plan(ctx context.Context, j *job, cat *config.Catalog) (*sched.Plan, error) {
	return c.planFileOn(ctx, j, c.planFile(j), j.file.Method, cat, true)
}

// belowLimit begins the reason of a job that a restart placed below its
// throughput_limit, shrunkBelow that of one that went on without a dead
// node's replicas; the job keeps it when done.
const (
	belowLimit  = "restarted below its throughput_limit"
	shrunkBelow = "shrunk below its throughput_limit"
)

// runsBelowLimit reports whether j lost units that its throughput_limit
// needs and has not won them back.
func runsBelowLimit(j *job) bool {
	return strings.HasPrefix(j.reason, belowLimit) || strings.HasPrefix(j.reason, shrunkBelow)
}

// anyThroughput is the limit a plan that may run at any speed is asked
// for: one sample a second.
const anyThroughput = 1

// planBelowLimit is the plan of a restarted job that the free live units
// of cat cannot carry at its throughput_limit: the cheapest plan of the
// highest throughput they reach (exact, found within 1 % of the limit), so
// that a job that lost a node goes on at what the survivors can do — as a
// parameter-server stage that loses a replica shrinks in place and goes on
// — instead of waiting for units that may not come back. It also returns
// the limit the plan falls short of; infeasible comes back as it is (and
// 0) where the units reach nothing, the job has no limit or planning
// fails.
func (c *Coordinator) planBelowLimit(ctx context.Context, j *job, cat *config.Catalog, infeasible *sched.Plan) (*sched.Plan, float64) {
	jf := *c.planFile(j)
	limit := jf.ThroughputLimit
	if limit <= anyThroughput || len(cat.Types) == 0 {
		return infeasible, 0
	}
	jf.ThroughputLimit = anyThroughput // 0 would ask for the floor derived from the catalog
	best, err := c.planFileOn(ctx, j, &jf, "exact", cat, false)
	if err != nil || !best.Feasible {
		// The search is a fallback: where it fails (out of planning
		// time, say) the job waits for units as before, it does not fail.
		if err != nil {
			c.log.Warn("planning a restart below its throughput_limit", "job", j.id, "err", err)
		}
		return infeasible, 0
	}
	for lo, hi := best.Throughput, limit; hi-lo > limit/100; {
		jf.ThroughputLimit = (lo + hi) / 2
		p, err := c.planFileOn(ctx, j, &jf, "exact", cat, false)
		switch {
		case err != nil: // the best plan so far will do
			c.log.Warn("planning a restart below its throughput_limit", "job", j.id, "err", err)
			return best, limit
		case p.Feasible:
			best, lo = p, max(jf.ThroughputLimit, p.Throughput)
		default:
			hi = jf.ThroughputLimit
		}
	}
	return best, limit
}

// planFileOn plans j as jf describes it with method on the units of cat,
// logging the stored profiles it could not use if warn.
func (c *Coordinator) planFileOn(ctx context.Context, j *job, jf *config.Job, method string, cat *config.Catalog, warn bool) (_ *sched.Plan, err error) {
	defer c.recoverInto(&err, j.id, "planning")
	if len(cat.Types) == 0 {
		return &sched.Plan{Method: j.file.Method, Reason: "no live node offers free units"}, nil
	}
	if j.file.PSType != "" {
		if _, ok := cat.Type(j.file.PSType); !ok {
			return &sched.Plan{Method: j.file.Method, Reason: fmt.Sprintf("no live node offers the parameter-server type %s", j.file.PSType)}, nil
		}
	}
	p, src, err := jobProblem(jf, j.model, cat, c.storedProfiles(j.model.Name))
	if err != nil {
		return nil, err
	}
	for _, why := range src.skipped {
		if warn {
			c.log.Warn("stored profile not used", "job", j.id, "reason", why)
		}
	}
	if j.replan.correct(p) { // measured speeds (replan.go): plan as the re-planner did
		method = "exact"
	}
	plan, err := sched.Run(ctx, method, p, sched.Options{Seed: j.file.Seed})
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("method %s did not finish within %s", method, c.cfg.PlanTimeout)
	}
	if err == nil {
		plan.Sources, plan.DenseSync = src.types, src.denseSync
	}
	if err == nil && j.model.HasTowers() && len(plan.Stages) == 1 {
		plan.Stages[0].Last = len(j.model.Shapes()) - 1 // the one merged layer is every layer
	}
	return plan, err
}

// replanCatalog is the catalog a running j is planned on again (a re-plan,
// a move back up or off a draining node): its own units and the free live
// ones it need not avoid. c.mu is held.
func (c *Coordinator) replanCatalog(j *job) *config.Catalog {
	return liveCatalog(c.cfg.Catalog, c.cluster(j, true).free())
}

// liveCatalog is cat with each type's max_units replaced by the free live
// units of that type; types with none are left out.
func liveCatalog(cat *config.Catalog, free map[string]int) *config.Catalog {
	live := &config.Catalog{Version: cat.Version, Name: cat.Name, Nodes: cat.Nodes}
	for _, t := range cat.Types {
		if free[t.Name] > 0 {
			t.MaxUnits = free[t.Name]
			live.Types = append(live.Types, t)
		}
	}
	return live
}

// cluster is the registry as placement of j sees it: the live nodes it
// may use (none draining, and without its suspects if avoid is set) in
// registration order, the nodes already hosting a stage replica of a
// running job other than j (a running j's own units count as free to
// re-plan it), and how many tasks each node hosts. c.mu is held.
func (c *Coordinator) cluster(j *job, avoid bool) cluster {
	cl := cluster{busy: map[*node]bool{}, load: map[*node]int{}}
	now := time.Now()
	for _, n := range c.nodes {
		if n.alive() && !c.draining(n) && !(avoid && j.suspect(n.req.Name, now)) {
			cl.live = append(cl.live, n)
		}
	}
	for _, o := range c.jobs {
		if o.state != api.JobRunning || o == j {
			continue
		}
		for _, t := range o.tasks {
			if t.node == nil {
				continue
			}
			cl.load[t.node]++
			if t.task.Role == api.RoleStage {
				cl.busy[t.node] = true
			}
		}
	}
	if c.allocPolicy() != "" {
		c.shareNodes(&cl)
	}
	return cl
}

// free is the units of each type that live nodes hosting no stage offer.
func (cl cluster) free() map[string]int {
	free := map[string]int{}
	for _, n := range cl.live {
		if !cl.busy[n] {
			free[n.req.Type] += n.stageUnits()
		}
	}
	if cl.slots != nil {
		return oneUnitEach(free)
	}
	return free
}

// suspect reports whether the node named name failed j recently.
func (j *job) suspect(name string, now time.Time) bool {
	return slices.ContainsFunc(j.suspects, func(s store.Suspect) bool { return s.Node == name && now.Before(s.Until) })
}

// avoids is the nodes j does not use at now (its unexpired suspects), each
// once with its latest Until, by name.
func (j *job) avoids(now time.Time) []api.AvoidedNode {
	until := map[string]time.Time{}
	for _, s := range j.suspects {
		if now.Before(s.Until) && s.Until.After(until[s.Node]) {
			until[s.Node] = s.Until
		}
	}
	var out []api.AvoidedNode
	for _, name := range slices.Sorted(maps.Keys(until)) {
		out = append(out, api.AvoidedNode{Node: name, Until: until[name]})
	}
	return out
}
