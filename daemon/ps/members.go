package ps

import (
	"errors"
	"fmt"
	"slices"
)

// MaxReplicaID bounds the replica ids a membership may name.
const MaxReplicaID = 1 << 20

// Errors of membership changes and of pushes they turn away.
var (
	// ErrNotMember: the push's replica is not a member of its stage for
	// the push's step.
	ErrNotMember = errors.New("replica is not a member of the stage for that step")
)

// membership is one stage's replica set over the steps: changes[i].replicas
// holds from changes[i].from until the next change. changes[0].from is 0,
// and the list ascends by from.
type membership struct {
	changes []memberChange
}

type memberChange struct {
	from     int64
	replicas []int // ascending, distinct
}

func firstMembers(n int) *membership {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return &membership{changes: []memberChange{{from: 0, replicas: r}}}
}

// at returns the replicas of step.
func (m *membership) at(step int64) []int {
	i := len(m.changes) - 1
	for i > 0 && m.changes[i].from > step {
		i--
	}
	return m.changes[i].replicas
}

// set makes replicas the members from step from on, replacing the changes
// recorded at or after it.
func (m *membership) set(from int64, replicas []int) {
	keep := len(m.changes)
	for keep > 1 && m.changes[keep-1].from >= from {
		keep--
	}
	m.changes = append(m.changes[:keep], memberChange{from: from, replicas: replicas})
}

// SetMembers makes replicas (ids, not necessarily 0..n-1) the members of
// stage from step fromStep on, replacing any change recorded for later
// steps. Calling it again with the same arguments changes nothing more.
//
// The rule for steps already under way (BSP): the change reaches every
// table and block of the stage on this shard whose step fromStep or later
// is open, not only steps still to come. In an open step, pushes already
// made by replicas that are no longer members are discarded, the weights
// are renormalised over the members that remain, and the step is applied
// as soon as every remaining member has pushed — so removing a replica
// whose node died completes the step the survivors are waiting in. A step
// already applied keeps the set it was applied with. Members added to an
// open step are waited for like the others.
func (s *Shard) SetMembers(stage int, fromStep int64, replicas []int) error {
	fail := func(err error) error {
		return fmt.Errorf("ps shard %d: set members of stage %d from step %d: %w", s.cfg.Shard, stage, fromStep, err)
	}
	set, err := memberSet(replicas)
	if err != nil {
		return fail(err)
	}
	if fromStep < 1 {
		return fail(fmt.Errorf("step %d, want >= 1: %w", fromStep, ErrArg))
	}
	params := s.stageParams(stage)
	for _, p := range params {
		p.st.mu.Lock()
		defer p.st.mu.Unlock()
	}
	s.membersMu.Lock()
	m, ok := s.members[stage]
	var late error
	if ok {
		late = addedTooLate(params, fromStep, m.at(fromStep), set)
	}
	if ok && late == nil {
		m.set(fromStep, set)
	}
	s.membersMu.Unlock()
	if !ok {
		return fail(fmt.Errorf("the stage owns no table or block here: %w", ErrArg))
	}
	if late != nil {
		return fail(late)
	}
	var errs []error
	for _, p := range params {
		b := p.st.open
		if b == nil || b.step < fromStep {
			continue
		}
		p.st.open = b.withMembers(set)
		if p.st.open.full() && !s.held(b.step) {
			errs = append(errs, p.apply(s))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fail(fmt.Errorf("apply the completed step: %w", err))
	}
	return nil
}

// ErrLate: a membership change adds a replica at a step already applied
// without it.
var ErrLate = errors.New("the step was applied before the change came")

// addedTooLate refuses a change from fromStep that adds replicas to old
// (the members of fromStep) when a table or block has applied that step
// already: the new replica's push for it could no longer count. Dropping
// replicas is fine: the steps applied kept their set. Under the params'
// locks.
func addedTooLate(params []stageParam, fromStep int64, old, set []int) error {
	added := slices.ContainsFunc(set, func(r int) bool { return !slices.Contains(old, r) })
	if !added {
		return nil
	}
	for _, p := range params {
		if p.st.version >= fromStep {
			return fmt.Errorf("adding replicas %v -> %v from step %d: step %d is applied: %w", old, set, fromStep, p.st.version, ErrLate)
		}
	}
	return nil
}

// memberSet checks a replica set and returns it sorted.
func memberSet(replicas []int) ([]int, error) {
	if len(replicas) == 0 {
		return nil, fmt.Errorf("no replicas: %w", ErrArg)
	}
	set := slices.Clone(replicas)
	slices.Sort(set)
	for i, r := range set {
		if r < 0 || r >= MaxReplicaID {
			return nil, fmt.Errorf("replica id %d outside [0, %d): %w", r, MaxReplicaID, ErrArg)
		}
		if i > 0 && set[i-1] == r {
			return nil, fmt.Errorf("replica %d listed twice: %w", r, ErrArg)
		}
	}
	return set, nil
}

// Members returns the replicas of stage for step.
func (s *Shard) Members(stage int, step int64) ([]int, error) {
	s.membersMu.Lock()
	defer s.membersMu.Unlock()
	m, ok := s.members[stage]
	if !ok {
		return nil, fmt.Errorf("ps shard %d: members of stage %d: the stage owns no table or block here: %w", s.cfg.Shard, stage, ErrArg)
	}
	return slices.Clone(m.at(step)), nil
}

// membersAt returns the replicas of stage for step (shared: not to be
// modified). Called with a table's or block's lock held.
func (s *Shard) membersAt(stage int, step int64) []int {
	s.membersMu.Lock()
	defer s.membersMu.Unlock()
	if m, ok := s.members[stage]; ok {
		return m.at(step)
	}
	return nil
}

// stageParam is a table or block of one stage with the way to apply its
// full BSP step.
type stageParam struct {
	st    *stepped
	apply func(*Shard) error
}

// stageParams returns the stage's tables and blocks in the order
// checkpoints lock them (all), which every caller locking several keeps.
func (s *Shard) stageParams(stage int) []stageParam {
	var out []stageParam
	for _, t := range sortedValues(s.tables) {
		if t.spec.Stage == stage {
			out = append(out, stageParam{&t.stepped, t.applyStep})
		}
	}
	for _, b := range sortedValues(s.blocks) {
		if b.spec.Stage == stage {
			out = append(out, stageParam{&b.stepped, b.applyStep})
		}
	}
	return out
}

// stageMembers returns members for admit.
func (s *Shard) stageMembers(stage int) func(step int64) []int {
	return func(step int64) []int { return s.membersAt(stage, step) }
}
