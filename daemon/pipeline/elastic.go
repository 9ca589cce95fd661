package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/heterps/heterps/daemon/data"
)

// ErrNotMember: the replica is not a member of its stage for the step.
var ErrNotMember = errors.New("replica is not a member of its stage for the step")

// Share is a data-parallel stage's make-up from some step on: its member
// replica ids, ascending, and each member's batch. Member i (Members[i])
// reads data shard i of len(Members) with batch Batches[i]. Next, if set,
// is the batch of each replica of the next stage, which this stage (of one
// replica) splits its rows among (lanes.go); nil means near-equal pieces.
//
// Start, when > 0, makes the share exact: stage 0's data segment that
// begins with it starts at record Start instead of where the replica
// computes the stage has reached, and the worker takes it at exactly its
// step or refuses it (Resize). A replica joining a running stage needs
// both: it has no history to compute the start from, and every member
// must shard the same segment from the same step.
type Share struct {
	Members []int
	Batches []int
	Next    []int
	Start   int64
}

func (s Share) check() error {
	if len(s.Members) == 0 || len(s.Batches) != len(s.Members) {
		return fmt.Errorf("share: %d members with %d batches, want as many and at least one", len(s.Members), len(s.Batches))
	}
	if s.Start < 0 {
		return fmt.Errorf("share: data start %d, want >= 0", s.Start)
	}
	for i, r := range s.Members {
		if r < 0 || r >= maxReplicas || (i > 0 && s.Members[i-1] >= r) {
			return fmt.Errorf("share: members %v: want distinct ascending ids in [0, %d)", s.Members, maxReplicas)
		}
		if s.Batches[i] < 1 {
			return fmt.Errorf("share: member %d has batch %d, want >= 1", r, s.Batches[i])
		}
	}
	for k, b := range s.Next {
		if b < 1 {
			return fmt.Errorf("share: next stage's replica %d has batch %d, want >= 1", k, b)
		}
	}
	return nil
}

// Of returns replica's data shard (its index among the members) and batch.
func (s Share) Of(replica int) (shard, batch int, ok bool) {
	i, ok := slices.BinarySearch(s.Members, replica)
	if !ok {
		return 0, 0, false
	}
	return i, s.Batches[i], true
}

// reader is base's options for data shard shard of the share, from
// record start: what member shard reads.
func (s Share) reader(base data.Options, shard int, start int64) data.Options {
	base.Shard, base.Shards, base.Start = shard, len(s.Members), start
	return base
}

func (s Share) equal(o Share) bool {
	return slices.Equal(s.Members, o.Members) && slices.Equal(s.Batches, o.Batches) && slices.Equal(s.Next, o.Next) && s.Start == o.Start
}

func (s Share) clone() Share {
	return Share{Members: slices.Clone(s.Members), Batches: slices.Clone(s.Batches), Next: slices.Clone(s.Next), Start: s.Start}
}

// ErrLate: an exact share (Share.Start) reached a replica that had read
// its first step's input already.
var ErrLate = errors.New("the change came after the replica had read its step's input")

// shareChange is a Share in force from step from on.
type shareChange struct {
	from  int64
	share Share
}

// Resize makes share the stage's make-up from step fromStep on, or from the
// first step whose input this replica has not asked for yet if that is
// later (a step's input is read ahead while the step before runs); it
// returns the step the change takes effect at. An exact share (Start > 0)
// takes effect at fromStep or not at all (ErrLate). A replica that is not a
// member of a step refuses to run it (ErrNotMember) and reads nothing ahead
// for it; its caller stops at Member. Only single-stage jobs may change
// their members; other stages may change batches only. Safe to call while
// Step runs.
func (w *Worker) Resize(fromStep int64, share Share) (int64, error) {
	fail := func(err error) (int64, error) {
		return 0, fmt.Errorf("pipeline: job %s stage %d replica %d: resize from step %d: %w", w.cfg.Job, w.cfg.Stage, w.cfg.Replica, fromStep, err)
	}
	share = share.clone()
	if err := share.check(); err != nil {
		return fail(err)
	}
	w.shareMu.Lock()
	defer w.shareMu.Unlock()
	from := max(fromStep, w.asked+1)
	if share.Start > 0 && from != fromStep {
		return fail(fmt.Errorf("an exact change (data from record %d) must start at its step, and step %d's input was read: %w", share.Start, w.asked, ErrLate))
	}
	if cur := w.shareAt(from); w.cfg.Stages > 1 && !slices.Equal(cur.Members, share.Members) {
		return fail(fmt.Errorf("members %v -> %v: a stage of a multi-stage job cannot change its replicas yet (its partners would change)",
			cur.Members, share.Members))
	}
	if cur := w.shareAt(from); w.local != nil && w.local.shard && !w.local.everyPeer && !slices.Equal(cur.Members, share.Members) {
		return fail(fmt.Errorf("members %v -> %v: the stage shards its optimiser state over its ring (Allreduce.ShardOptimiser), which cannot change members",
			cur.Members, share.Members))
	}
	keep := len(w.shares)
	for keep > 1 && w.shares[keep-1].from >= from {
		keep--
	}
	w.shares = append(w.shares[:keep], shareChange{from: from, share: share})
	return from, nil
}

// Member reports whether the replica is a member of its stage for step.
func (w *Worker) Member(step int64) bool {
	w.shareMu.Lock()
	defer w.shareMu.Unlock()
	_, _, ok := w.shareAt(step).Of(w.cfg.Replica)
	return ok
}

// shareAt returns the share of step; under shareMu.
func (w *Worker) shareAt(step int64) Share {
	i := len(w.shares) - 1
	for i > 0 && w.shares[i].from > step {
		i--
	}
	return w.shares[i].share
}

// askFor records that step's input is being read and returns its share.
func (w *Worker) askFor(step int64) Share {
	w.shareMu.Lock()
	defer w.shareMu.Unlock()
	w.asked = max(w.asked, step)
	return w.shareAt(step)
}

// firstShare is the share a worker starts with: cfg.Share, or only the
// replica itself, its batch left to cfg.Batches.
func firstShare(cfg *Config) Share {
	if len(cfg.Share.Members) > 0 {
		return cfg.Share.clone()
	}
	return Share{Members: []int{cfg.Replica}, Batches: []int{0}}
}

// ShardedInput reads a stage-0 replica's batches for Config.Input. The
// data is read in segments, one per share: in a segment that starts at step
// F at record index P with share S, member i reads shard i of len(S.Members)
// (records j >= P with j mod len(S.Members) == i) with batch S.Batches[i].
// When the share changes at step F', the next segment starts at the record
// index the whole stage has reached: the largest over the old members of
// where member i's reader is after (F' - F) x S.Batches[i] records
// (data.Options.After). With equal batches and no change, that is the data
// order of a fixed stage; across a change, every record is read at most
// once, and the few records below the new start that a slower member's
// shard had not reached are skipped. Positions are counted as if the data
// never ended: a change after a file's data has wrapped around starts the
// new segment beyond its end, so it begins again from the start of the file.
type ShardedInput struct {
	Replica int
	// Base gives the options every segment's reader opens with (Vocab,
	// Split, EvalFraction); Shard, Shards and Start are set per segment.
	Base data.Options
	// Open opens the data with the given options.
	Open func(data.Options) (data.Source, error)
	// Ahead, when > 0, reads up to that many of the segment's next batches
	// on a goroutine of its own while the step trains (the single process
	// does the same: data.Prefetch). Positions are counted from steps, not
	// from the reader, so batches read ahead of a share change are dropped
	// and the new segment starts where it would without them.
	Ahead int

	mu          sync.Mutex // guards the segment and the cursors against Segment
	from, start int64      // the current segment: its first step and record
	share       Share
	// cursors[i] is where member i's reader of the segment is after the
	// steps before step at: advanced a step at a time as steps are read,
	// so that finding where the stage has got to never counts the whole
	// segment's records again.
	at      int64
	cursors []int64
	scratch []int64 // advance's, reused
	src     data.Source
	next    int64 // the step the reader is positioned for
	ahead   *data.Prefetcher[*data.Batch]
}

// Begin sets the segment the reader is in: from step from, at record
// start, with share. src, if not nil, is the replica's reader of that
// segment positioned for step next; otherwise Next opens one.
func (in *ShardedInput) Begin(from, start int64, share Share, src data.Source, next int64) {
	in.mu.Lock()
	in.begin(from, start, share)
	in.mu.Unlock()
	in.src, in.next = src, next
}

// begin starts a segment, its cursors at its start. Under mu.
func (in *ShardedInput) begin(from, start int64, share Share) {
	in.from, in.start, in.share, in.at = from, start, share, from
	in.cursors = make([]int64, len(share.Members))
	for i := range in.cursors {
		in.cursors[i] = start
	}
}

// Segment is the data segment a replica reads: from step From on, at
// record Start, the members of Share read their shards of the data with
// its batches; the replica's own reader is at record Position after the
// segment's steps before step At.
type Segment struct {
	From, Start  int64
	Share        Share
	At, Position int64
}

// Segment returns the segment the replica reads and where its reader is,
// for the coordinator to compute where the stage has got to
// (PositionAt). Safe to call while Next runs.
func (in *ShardedInput) Segment() Segment {
	in.mu.Lock()
	defer in.mu.Unlock()
	seg := Segment{From: in.from, Start: in.start, Share: in.share.clone(), At: in.at, Position: in.start}
	if i, _, ok := in.share.Of(in.Replica); ok {
		seg.Position = in.cursors[i]
	}
	return seg
}

// PositionAt returns the record index the reader of replica, the one
// whose segment s is, will be at after the steps before step, counted by
// base's selection rules from where it is (s.Position at s.At): the
// records of step - s.At steps.
func (s Segment) PositionAt(base data.Options, replica int, step int64) (int64, error) {
	shard, batch, ok := s.Share.Of(replica)
	if !ok {
		return 0, fmt.Errorf("replica %d is not a member of its segment from step %d (%v)", replica, s.From, s.Share.Members)
	}
	if step < s.At {
		return 0, fmt.Errorf("step %d is before step %d, where its reader is", step, s.At)
	}
	return s.Share.reader(base, shard, s.Position).After((step - s.At) * int64(batch))
}

// Next returns the replica's batch of step under share. Steps come in
// order, one at a time.
func (in *ShardedInput) Next(ctx context.Context, step int64, share Share) (*data.Batch, error) {
	if !share.equal(in.share) {
		start, err := in.reached(step)
		if err != nil {
			return nil, err
		}
		if share.Start > 0 {
			start = share.Start
		}
		in.Close()
		in.mu.Lock()
		in.begin(step, start, share)
		in.mu.Unlock()
	}
	shard, batch, ok := share.Of(in.Replica)
	if !ok {
		return nil, fmt.Errorf("step %d: replica %d of %v: %w", step, in.Replica, share.Members, ErrNotMember)
	}
	if err := in.advance(step); err != nil {
		return nil, err
	}
	if in.src == nil || in.next != step {
		if err := in.open(step, shard); err != nil {
			return nil, err
		}
	}
	b, err := in.read(ctx, batch)
	if err != nil {
		return nil, err
	}
	in.next = step + 1
	return b, nil
}

// read returns the reader's next batch, through the prefetcher when in.Ahead
// asks for one.
func (in *ShardedInput) read(ctx context.Context, batch int) (*data.Batch, error) {
	if in.Ahead <= 0 {
		return in.src.Next(ctx, batch)
	}
	if in.ahead == nil {
		var err error
		// The prefetcher's reads end with Close, not with one step's ctx.
		if in.ahead, err = data.PrefetchBatches(context.Background(), in.src, batch, in.Ahead, 0); err != nil {
			return nil, err
		}
	}
	return in.ahead.Next(ctx)
}

// reached returns the record index the stage has reached at step in the
// current segment: the furthest of the members' cursors.
func (in *ShardedInput) reached(step int64) (int64, error) {
	if err := in.advance(step); err != nil {
		return 0, err
	}
	return slices.Max(in.cursors), nil
}

// advance moves the cursors to step: each member's past the records of
// its shard its batches of the steps from in.at read.
func (in *ShardedInput) advance(step int64) error {
	if step < in.at {
		return fmt.Errorf("step %d: the data is at step %d already (steps come in order)", step, in.at)
	}
	// Counted off the lock: a restored job's first step counts every
	// record before it, and Segment must not wait for that.
	in.scratch = append(in.scratch[:0], in.cursors...)
	for i, b := range in.share.Batches {
		p, err := in.share.reader(in.Base, i, in.scratch[i]).After((step - in.at) * int64(b))
		if err != nil {
			return err
		}
		in.scratch[i] = p
	}
	in.mu.Lock()
	copy(in.cursors, in.scratch)
	in.at = step
	in.mu.Unlock()
	return nil
}

// open opens the replica's shard of the current segment positioned for
// step, whose cursor is advanced to it.
func (in *ShardedInput) open(step int64, shard int) error {
	in.Close()
	o := in.share.reader(in.Base, shard, in.cursors[shard])
	var err error
	if in.src, err = in.Open(o); err != nil {
		return fmt.Errorf("open data shard %d of %d from record %d: %w", shard, o.Shards, o.Start, err)
	}
	in.next = step
	return nil
}

// Close closes the current reader, after stopping its prefetcher.
func (in *ShardedInput) Close() error {
	if in.ahead != nil {
		in.ahead.Close()
		in.ahead = nil
	}
	if in.src == nil {
		return nil
	}
	err := in.src.Close()
	in.src = nil
	return err
}
