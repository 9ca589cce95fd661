package sched

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Method schedules a problem: it picks a type per layer and the units per
// stage. Infeasible problems give a plan with Feasible false and a Reason,
// not an error; errors are for refusals (ErrRefused), cancellation and
// budgets.
type Method interface {
	Schedule(ctx context.Context, p *Problem) (*Plan, error)
}

// Options configure methods; zero values select the defaults.
type Options struct {
	Seed      uint64 // randomised methods
	MaxPlans  int64  // bf: refuse problems with more assignments than this
	Budget    int    // bo (at most 400), genetic: cost-model evaluations; rl, rl-rnn: sampled plans
	Provision string // provisioning rule of the methods that pick an assignment
	MaxLabels int    // exact: label-search budget per target level
	// Policy, for rl and rl-rnn, receives the trained policy; unless it is
	// the zero Policy it is also the policy to start from (same cell and
	// number of types).
	Policy *Policy
	// FreshPolicy makes rl start from a fresh random policy instead of the
	// shipped pre-trained one.
	FreshPolicy bool
}

// Defaults.
const (
	DefaultMaxPlans  = 1 << 21
	DefaultMaxLabels = 2_000_000
)

func (o Options) withDefaults() Options {
	if o.MaxPlans <= 0 {
		o.MaxPlans = DefaultMaxPlans
	}
	if o.Provision == "" {
		o.Provision = RuleBreakpoints
	}
	if o.MaxLabels <= 0 {
		o.MaxLabels = DefaultMaxLabels
	}
	return o
}

// Factory makes a method from its options.
type Factory func(Options) Method

type registration struct {
	summary string
	factory Factory
}

var registry = map[string]registration{}

// Register adds a method under name; methods register from their file's
// init, and registering a name twice is a programming error.
func Register(name, summary string, f Factory) {
	if _, dup := registry[name]; dup {
		panic("sched: method registered twice: " + name)
	}
	registry[name] = registration{summary: summary, factory: f}
}

// Methods lists the registered method names, sorted.
func Methods() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Summary is a method's one-line description.
func Summary(name string) string { return registry[name].summary }

// Errors of Run.
var (
	ErrUnknownMethod = errors.New("unknown scheduling method")
	ErrRefused       = errors.New("method refuses this problem")
)

// Run schedules p with the named method and records the method's name and
// the seconds it took in the plan.
func Run(ctx context.Context, name string, p *Problem, o Options) (*Plan, error) {
	reg, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("sched: %w %q (have %v)", ErrUnknownMethod, name, Methods())
	}
	if _, err := p.Provision(make([]int, len(p.Layers)), o.Provision); err != nil {
		return nil, err // an unknown rule
	}
	start := time.Now()
	plan, err := reg.factory(o.withDefaults()).Schedule(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("sched: %s: %w", name, err)
	}
	plan.Method = name
	plan.SchedSeconds = time.Since(start).Seconds()
	return plan, nil
}

// evaluator provisions assignments for the search methods, counting and
// caching evaluations.
type evaluator struct {
	p     *Problem
	rule  string
	count int
	cache map[string]Provisioning
}

func newEvaluator(p *Problem, rule string) *evaluator {
	return &evaluator{p: p, rule: rule, cache: map[string]Provisioning{}}
}

func (e *evaluator) eval(assign []int) Provisioning {
	key := assignKey(assign)
	if pr, ok := e.cache[key]; ok {
		return pr
	}
	e.count++
	pr, err := e.p.Provision(assign, e.rule)
	if err != nil { // assignments come from the methods themselves
		panic(fmt.Sprintf("sched: evaluator: %v", err))
	}
	e.cache[key] = pr
	return pr
}

// cost is the plan's cost, +Inf when infeasible.
func (e *evaluator) cost(assign []int) float64 {
	if pr := e.eval(assign); pr.Feasible {
		return pr.Cost
	}
	return inf
}

// plan is the method's answer for its chosen assignment.
func (e *evaluator) plan(assign []int) *Plan {
	plan := e.p.Plan("", assign, e.eval(assign))
	plan.Evaluations = e.count
	return plan
}

var inf = math.Inf(1)

func assignKey(assign []int) string {
	b := make([]byte, 0, 2*len(assign))
	for _, t := range assign {
		b = append(b, byte(t), byte(t>>8))
	}
	return string(b)
}
