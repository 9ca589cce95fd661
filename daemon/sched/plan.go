package sched

import (
	"errors"
	"fmt"
	"strings"

	"github.com/heterps/heterps/config"
)

// Stage is one stage of a plan: layers First..Last (0-based, inclusive) on
// Type with Units units, running at Throughput samples/s.
type Stage struct {
	First      int     `json:"first"`
	Last       int     `json:"last"`
	Type       string  `json:"type"`
	Units      int     `json:"units"`
	Throughput float64 `json:"throughput"`
}

// Plan is a method's answer, in the JSON shape of `heterps plan --json`
// (DESIGN.md). Assign, the stages' units and PSCores are enough to re-cost
// it (Recost); Provision names the rule that chose the units.
type Plan struct {
	Method       string   `json:"method"`
	Feasible     bool     `json:"feasible"`
	Reason       string   `json:"reason,omitempty"`
	Cost         float64  `json:"cost"`
	Throughput   float64  `json:"throughput"`
	TimeS        float64  `json:"time_s"`
	Assign       []string `json:"assign"`
	Stages       []Stage  `json:"stages"`
	PSCores      int      `json:"ps_cores"`
	PSType       string   `json:"ps_type"`
	SchedSeconds float64  `json:"sched_seconds"`
	Provision    string   `json:"provision"`
	Evaluations  int      `json:"evaluations,omitempty"` // cost-model evaluations a search method made
	// Learned methods (rl, rl-rnn): the cost of the trained policy's own
	// decision (its most likely assignment) and of the best plan found while
	// training, sampled or reached by the local search from a sample (0 when
	// infeasible), and which of the two the plan is.
	PolicyCost      float64 `json:"policy_cost,omitempty"`
	BestSampledCost float64 `json:"best_sampled_cost,omitempty"`
	Decision        string  `json:"decision,omitempty"`
	// Sources says, per type name, where the layer times planned on came
	// from: SourceMeasured (a profile heterps profile measured),
	// SourceEstimated (roofline estimates from the catalog's device
	// descriptors) or SourceGiven (a problem file's numbers, whose origin
	// heterps does not know). The scheduler leaves it nil; whoever built
	// the problem fills it in.
	Sources map[string]string `json:"sources,omitempty"`
	// DenseSync says, per measured type whose profile folded a dense_sync
	// method's synchronisation in, which one (ps or allreduce): a job with
	// dense_sync = "auto" syncs such a type's stages that way. Filled in
	// like Sources.
	DenseSync map[string]string `json:"dense_sync,omitempty"`
}

// Plan.Sources values.
const (
	SourceMeasured  = "measured"
	SourceEstimated = "estimated"
	SourceGiven     = "given"
)

// AllSources maps every type of p to source.
func AllSources(p *Problem, source string) map[string]string {
	out := make(map[string]string, len(p.Types))
	for _, t := range p.Types {
		out[t.Name] = source
	}
	return out
}

// MeasuredDenseSync is Plan.DenseSync for problem p whose types' layer
// times came from sources (Plan.Sources): each measured type's dense_sync,
// where its profile folded one in; nil when none did.
func MeasuredDenseSync(p *config.Problem, sources map[string]string) map[string]string {
	var out map[string]string
	for _, t := range p.Types {
		if t.DenseSync == "" || sources[t.Name] != SourceMeasured {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[t.Name] = t.DenseSync
	}
	return out
}

// Plan.Decision values.
const (
	DecisionPolicy  = "policy"  // the policy's most likely assignment
	DecisionSampled = "sampled" // the best assignment found in training, cheaper than the policy's
)

// newPlan builds a feasible plan from provisioned segments.
func (p *Problem) newPlan(assign []int, segs []Segment, psCores int, rule string) *Plan {
	c := p.Cost(segs, psCores)
	plan := &Plan{Feasible: true, Cost: c.Cost, Throughput: c.Throughput, TimeS: c.TimeS,
		Assign: p.typeNames(assign), PSCores: psCores, PSType: p.PSTypeName(), Provision: rule}
	for _, s := range segs {
		plan.Stages = append(plan.Stages, Stage{First: s.First, Last: s.Last, Type: p.Types[s.Type].Name,
			Units: s.Units, Throughput: p.StageThroughput(s)})
	}
	return plan
}

// infeasiblePlan is the answer when no provisioning meets the constraints;
// assign may be nil when no assignment is feasible.
func (p *Problem) infeasiblePlan(assign []int, rule, reason string) *Plan {
	return &Plan{Reason: reason, Assign: p.typeNames(assign), Stages: []Stage{}, PSType: p.PSTypeName(), Provision: rule}
}

func (p *Problem) typeNames(assign []int) []string {
	names := make([]string, len(assign))
	for i, t := range assign {
		names[i] = p.Types[t].Name
	}
	return names
}

// ErrPlan is wrapped by Recost and Check when a plan does not fit its problem.
var ErrPlan = errors.New("plan does not fit the problem")

// Recost recomputes a plan's cost, throughput and run time from its
// assignment, stage units and PS cores alone, ignoring the figures it
// reports. It checks that the stages are the maximal runs of the assignment.
func Recost(plan *Plan, p *Problem) (Costing, error) {
	segs, err := plan.segments(p)
	if err != nil {
		return Costing{}, err
	}
	return p.Cost(segs, plan.PSCores), nil
}

// Check verifies a plan against the problem's constraints: the throughput
// floor and the unit limit of every type, summed over its stages.
func Check(plan *Plan, p *Problem) error {
	segs, err := plan.segments(p)
	if err != nil {
		return err
	}
	if x := p.PipelineThroughput(segs); x < p.ThroughputLimit {
		return fmt.Errorf("%w: throughput %g below the limit %g", ErrPlan, x, p.ThroughputLimit)
	}
	used := make([]int, len(p.Types))
	for _, s := range segs {
		used[s.Type] += s.Units
	}
	for t, u := range used {
		if u > p.Types[t].MaxUnits {
			return fmt.Errorf("%w: %d units of %s, max_units is %d", ErrPlan, u, p.Types[t].Name, p.Types[t].MaxUnits)
		}
	}
	if plan.PSCores < 0 {
		return fmt.Errorf("%w: negative ps_cores", ErrPlan)
	}
	return nil
}

// segments turns the plan's JSON fields back into provisioned segments.
func (plan *Plan) segments(p *Problem) ([]Segment, error) {
	if len(plan.Assign) != len(p.Layers) {
		return nil, fmt.Errorf("%w: %d layers assigned, the problem has %d", ErrPlan, len(plan.Assign), len(p.Layers))
	}
	assign := make([]int, len(plan.Assign))
	for l, name := range plan.Assign {
		t, ok := p.TypeIndex(name)
		if !ok {
			return nil, fmt.Errorf("%w: layer %d on unknown type %q", ErrPlan, l, name)
		}
		assign[l] = t
	}
	segs := Segments(assign)
	if len(segs) != len(plan.Stages) {
		return nil, fmt.Errorf("%w: the assignment has %d stages, the plan lists %d", ErrPlan, len(segs), len(plan.Stages))
	}
	for i, st := range plan.Stages {
		s := &segs[i]
		if st.First != s.First || st.Last != s.Last || st.Type != p.Types[s.Type].Name {
			return nil, fmt.Errorf("%w: stage %d is layers %d-%d on %s, the assignment says %d-%d on %s",
				ErrPlan, i, st.First, st.Last, st.Type, s.First, s.Last, p.Types[s.Type].Name)
		}
		if st.Units < 1 {
			return nil, fmt.Errorf("%w: stage %d has %d units", ErrPlan, i, st.Units)
		}
		s.Units = st.Units
	}
	return segs, nil
}

// describe names a stage for messages: "stage 2 (layers 3-7 on v100)".
func (p *Problem) describe(i int, s Segment) string {
	layers := fmt.Sprintf("layer %d", s.First)
	if s.Last > s.First {
		layers = fmt.Sprintf("layers %d-%d", s.First, s.Last)
	}
	return fmt.Sprintf("stage %d (%s on %s)", i, layers, p.Types[s.Type].Name)
}

// joinInts formats 3, 4, 5 as "3 + 4 + 5".
func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, " + ")
}
