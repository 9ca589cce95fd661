package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// A pure data-parallel stage of two replicas (batches 3 and 5) drops
// replica 1 from step k+1 on: replica 0 takes the whole batch of 8, the
// parameter servers' barrier waits for it alone, replica 1 stops. The
// result equals single-process training on the stacked batch for k steps
// and on replica 0's batch of 8 after, to float32 rounding.
func TestResizeDropsAReplicaAtAStep(t *testing.T) {
	checkLeaks(t)
	const k, steps, tolerance = 2, 5, 2e-6
	cfg := modelConfig(t, sgdMomentum)
	ref := splitReference(t, cfg, steps, func(step int64) bool { return step > k })

	j := newJob(t, cfg, []Range{{0, 5}}, []int{2}, steps, ps.BSP)
	j.lastStep = steps
	trs := j.transports()
	before, after := Share{Members: []int{0, 1}, Batches: []int{3, 5}}, Share{Members: []int{0}, Batches: []int{8}}
	var ws []*Worker
	for r := range 2 {
		input := func(_ context.Context, step int64, s Share) (*data.Batch, error) {
			i, b, ok := s.Of(r)
			if !ok || s.Members[i] != r {
				return nil, errors.New("asked for input while not a member")
			}
			return elasticBatch(r, step, b), nil
		}
		w := j.elasticWorker(trs, r, before, input)
		if from, err := w.Resize(k+1, after); err != nil || from != k+1 {
			t.Fatalf("replica %d: Resize = %d, %v; want %d", r, from, err, k+1)
		}
		ws = append(ws, w)
	}
	for _, s := range j.shards {
		if err := s.SetMembers(0, k+1, after.Members); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 2)
	for r, w := range ws {
		go func() {
			var err error
			for step := int64(1); step <= steps && w.Member(step) && err == nil; step++ {
				_, err = w.Step(context.Background(), step)
			}
			if err == nil && r == 1 && w.Member(k+1) {
				err = errors.New("replica 1 is still a member after step k")
			}
			done <- err
		}()
	}
	for range ws {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ws[1].Step(context.Background(), k+1); !errors.Is(err, ErrNotMember) {
		t.Errorf("replica 1 asked to run step %d: %v, want ErrNotMember", k+1, err)
	}
	d := j.maxDiff(ref)
	t.Logf("largest difference from single-process training: %g", d)
	if d > tolerance || math.IsNaN(d) {
		t.Fatalf("parameters differ from single-process training by %g, tolerance %g", d, tolerance)
	}
	if from, err := ws[0].Resize(2, before); err != nil || from != steps+1 {
		t.Errorf("Resize from step 2 after step %d was read: %d, %v; want it moved to step %d", steps, from, err, steps+1)
	}
}

// The reverse: a stage of one replica (batch 8) takes replica 1 in from
// step k+1 by an exact change, batches 3 and 5. Replica 1 starts at that
// step with nothing but the share (it pulls what it needs), and the result
// equals single-process training on replica 0's batch for k steps and on
// the stacked batch after. A replica that has read the step's input
// already refuses the exact change (ErrLate) rather than take it later.
func TestResizeAddsAReplicaAtAStep(t *testing.T) {
	checkLeaks(t)
	const k, steps, tolerance = 2, 5, 2e-6
	cfg := modelConfig(t, sgdMomentum)
	ref := splitReference(t, cfg, steps, func(step int64) bool { return step <= k })

	j := newJob(t, cfg, []Range{{0, 5}}, []int{1}, steps, ps.BSP)
	j.lastStep = steps
	trs := j.transports()
	before, after := Share{Members: []int{0}, Batches: []int{8}}, Share{Members: []int{0, 1}, Batches: []int{3, 5}, Start: 99}
	input := func(r int) func(context.Context, int64, Share) (*data.Batch, error) {
		return func(_ context.Context, step int64, s Share) (*data.Batch, error) {
			_, b, ok := s.Of(r)
			if !ok {
				return nil, errors.New("asked for input while not a member")
			}
			return elasticBatch(r, step, b), nil
		}
	}
	w0 := j.elasticWorker(trs, 0, before, input(0))
	if from, err := w0.Resize(k+1, after); err != nil || from != k+1 {
		t.Fatalf("replica 0: Resize = %d, %v; want %d", from, err, k+1)
	}
	for _, s := range j.shards {
		if err := s.SetMembers(0, k+1, after.Members); err != nil {
			t.Fatal(err)
		}
	}
	w1 := j.elasticWorker(trs, 1, after, input(1))
	done := make(chan error, 2)
	run := func(w *Worker, first int64) {
		var err error
		for step := first; step <= steps && err == nil; step++ {
			_, err = w.Step(context.Background(), step)
		}
		done <- err
	}
	go run(w0, 1)
	go run(w1, k+1)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	d := j.maxDiff(ref)
	t.Logf("largest difference from single-process training: %g", d)
	if d > tolerance || math.IsNaN(d) {
		t.Fatalf("parameters differ from single-process training by %g, tolerance %g", d, tolerance)
	}
	if _, err := w0.Resize(3, Share{Members: []int{0, 1}, Batches: []int{4, 4}, Start: 7}); !errors.Is(err, ErrLate) {
		t.Errorf("an exact change from step 3 after step %d was read: %v, want ErrLate", steps, err)
	}
}

// elasticBatch is replica's batch of step, of size rows.
func elasticBatch(replica int, step int64, size int) *data.Batch {
	return testBatch(10+uint64(replica), uint64(step), size)
}

// splitReference is single-process training on replica 0's batch of 8
// at the steps alone says, and on replicas 0 and 1's batches of 3 and 5,
// stacked, at the others: a stage that changes between one replica and
// two.
func splitReference(t *testing.T, cfg *config.Model, steps int64, alone func(step int64) bool) *nn.Model {
	t.Helper()
	ref, _ := reference(t, cfg, steps, func(step int64) *data.Batch {
		if alone(step) {
			return elasticBatch(0, step, 8)
		}
		b, err := concatBatches([]*data.Batch{elasticBatch(0, step, 3), elasticBatch(1, step, 5)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
	return ref
}

// elasticWorker is a stage-0 replica's worker that reads through Input
// with the stage's share.
func (j *job) elasticWorker(trs map[string]*wire.TCPTransport, replica int, share Share,
	input func(context.Context, int64, Share) (*data.Batch, error)) *Worker {
	j.t.Helper()
	cfg := Config{Job: testJob, Stage: 0, Stages: len(j.stages), Replica: replica, Layers: j.stages[0],
		Model: buildModel(j.t, j.cfg), Backend: native.MustCPU(), PS: j.client(0, replica), Mode: j.mode,
		LastStep: int64(j.lastStep), StepTimeout: 30 * time.Second, Input: input, Share: share}
	cfg.Prev, cfg.Next = PartnerLinks(trs[nodeID(0, replica)], 0, replica, j.replicas, nodeID)
	if j.configure != nil {
		j.configure(&cfg, trs)
	}
	w, err := NewWorker(cfg)
	if err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(func() { w.Close() })
	return w
}

// A stage of a multi-stage job may change its batches, not its members.
func TestResizeRefusesPartnerChanges(t *testing.T) {
	checkLeaks(t)
	cfg := modelConfig(t, sgdMomentum)
	j := newJob(t, cfg, []Range{{0, 3}, {4, 5}}, []int{2, 1}, 3, ps.BSP)
	w := j.elasticWorker(j.transports(), 0, Share{Members: []int{0, 1}, Batches: []int{3, 5}},
		func(context.Context, int64, Share) (*data.Batch, error) { return nil, errors.New("not read") })
	if _, err := w.Resize(2, Share{Members: []int{0}, Batches: []int{8}}); err == nil {
		t.Error("a stage of a two-stage job dropped a replica")
	}
	if from, err := w.Resize(2, Share{Members: []int{0, 1}, Batches: []int{4, 4}}); err != nil || from != 2 {
		t.Errorf("new batches for the same members: %d, %v; want from step 2", from, err)
	}
	for _, bad := range []Share{{}, {Members: []int{1, 0}, Batches: []int{4, 4}}, {Members: []int{0, 1}, Batches: []int{4}}, {Members: []int{0, 1}, Batches: []int{4, 0}}} {
		if _, err := w.Resize(2, bad); err == nil {
			t.Errorf("Resize accepted %+v", bad)
		}
	}
}

// ShardedInput reads shard i of the members with member i's batch, and
// after a change the new members start where the stage had got to.
// The same holds when the input reads ahead: batches read before the
// change are dropped.
func TestShardedInputReshardsWhereTheStageGotTo(t *testing.T) {
	for _, ahead := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("ahead=%d", ahead), func(t *testing.T) {
			checkLeaks(t)
			shardedInputReshards(t, ahead)
		})
	}
}

func shardedInputReshards(t *testing.T, ahead int) {
	ctx := context.Background()
	base := data.Options{Split: data.SplitTrain}
	open := func(o data.Options) (data.Source, error) { return data.Open("synthetic:2", o) }
	two, one := Share{Members: []int{0, 1}, Batches: []int{3, 5}}, Share{Members: []int{1}, Batches: []int{8}}
	in := &ShardedInput{Replica: 1, Base: base, Open: open, Ahead: ahead}
	in.Begin(1, 0, two, nil, 1)
	defer in.Close()
	labels := func(b *data.Batch, err error) []float32 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b.Probs
	}
	var got []float32
	for step := int64(1); step <= 2; step++ {
		got = append(got, labels(in.Next(ctx, step, two))...)
	}
	after := labels(in.Next(ctx, 3, one))

	o := base
	o.Shard, o.Shards = 1, 2
	want := labels(readOpened(t, open, o, 10))
	if !slicesEqual(got, want) {
		t.Errorf("steps 1-2: %v, want shard 1 of 2's first 10 records %v", got, want)
	}
	o0 := base
	o0.Shards = 2
	p0, _ := o0.After(6)
	p1, _ := o.After(10)
	whole := base
	whole.Start = max(p0, p1)
	if want := labels(readOpened(t, open, whole, 8)); !slicesEqual(after, want) {
		t.Errorf("step 3 after the change: %v, want the 8 records from %d: %v", after, whole.Start, want)
	}
}

func mustAfter(t *testing.T, o data.Options, n int64) int64 {
	t.Helper()
	p, err := o.After(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// countingSource counts the batches asked of it.
type countingSource struct {
	data.Source
	reads atomic.Int64
}

func (c *countingSource) Next(ctx context.Context, n int) (*data.Batch, error) {
	c.reads.Add(1)
	return c.Source.Next(ctx, n)
}

// With Ahead, the batches after the one asked for are read while the step
// that asked trains, at most Ahead of them; without it, none.
func TestShardedInputReadsAhead(t *testing.T) {
	checkLeaks(t)
	for _, ahead := range []int{0, 2} {
		var src *countingSource
		open := func(o data.Options) (data.Source, error) {
			s, err := data.Open("synthetic:2", o)
			src = &countingSource{Source: s}
			return src, err
		}
		share := Share{Members: []int{0}, Batches: []int{4}}
		in := &ShardedInput{Replica: 0, Base: data.Options{Split: data.SplitTrain}, Open: open, Ahead: ahead}
		in.Begin(1, 0, share, nil, 1)
		if _, err := in.Next(context.Background(), 1, share); err != nil {
			t.Fatal(err)
		}
		// The prefetcher holds Ahead batches and blocks on one more.
		want := int64(1 + ahead)
		if ahead > 0 {
			want++
		}
		deadline := time.Now().Add(5 * time.Second)
		for src.reads.Load() < want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // and no more than that
		if got := src.reads.Load(); got != want {
			t.Errorf("ahead %d: %d batches read after step 1, want %d", ahead, got, want)
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func readOpened(t *testing.T, open func(data.Options) (data.Source, error), o data.Options, n int) (*data.Batch, error) {
	t.Helper()
	src, err := open(o)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return src.Next(context.Background(), n)
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// An exact share starts its segment at its own Start, not where the
// replica computes the stage has got to, and Segment reports the segment
// the reader is in; Segment.Reached is where a member's reader of it is.
func TestShardedInputTakesAnExactStart(t *testing.T) {
	ctx := context.Background()
	base := data.Options{Split: data.SplitTrain}
	open := func(o data.Options) (data.Source, error) { return data.Open("synthetic:2", o) }
	one := Share{Members: []int{0}, Batches: []int{4}}
	two := Share{Members: []int{0, 1}, Batches: []int{4, 6}, Start: 1000}
	in := &ShardedInput{Replica: 1, Base: base, Open: open}
	in.Begin(5, 1000, two, nil, 5) // a joining replica: its spec gives the start
	defer in.Close()
	got, err := in.Next(ctx, 5, two)
	if err != nil {
		t.Fatal(err)
	}
	o := base
	o.Shard, o.Shards, o.Start = 1, 2, 1000
	if want, _ := readOpened(t, open, o, 6); !slicesEqual(got.Probs, want.Probs) {
		t.Errorf("replica 1's first batch: %v, want shard 1 of 2 from record 1000: %v", got.Probs, want.Probs)
	}
	seg := in.Segment()
	if seg.From != 5 || seg.Start != 1000 || !seg.Share.equal(two) || seg.At != 5 || seg.Position != 1000 {
		t.Errorf("Segment = %+v, want from step 5 at record 1000 with %+v", seg, two)
	}
	p, err := seg.PositionAt(base, 1, 6)
	if want, _ := o.After(6); err != nil || p != want {
		t.Errorf("PositionAt(replica 1, step 6) = %d, %v; want %d", p, err, want)
	}
	for step := int64(6); step <= 7; step++ {
		if _, err := in.Next(ctx, step, two); err != nil {
			t.Fatal(err)
		}
	}
	if after, want := in.Segment(), mustAfter(t, o, 12); after.At != 7 || after.Position != want {
		t.Errorf("after reading steps 5-7: at step %d record %d, want step 7 record %d (steps 5 and 6: 12 records of its shard, counted afresh)", after.At, after.Position, want)
	}
	if _, err := seg.PositionAt(base, 2, 6); err == nil {
		t.Error("PositionAt of a replica that is not a member")
	}
	if _, err := seg.PositionAt(base, 1, 4); err == nil {
		t.Error("PositionAt of a step before the reader's")
	}

	zero := &ShardedInput{Replica: 0, Base: base, Open: open}
	zero.Begin(1, 0, one, nil, 1)
	defer zero.Close()
	for step := int64(1); step <= 2; step++ {
		if _, err := zero.Next(ctx, step, one); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := zero.Next(ctx, 3, Share{Members: []int{0, 1}, Batches: []int{4, 6}, Start: 500}); err != nil {
		t.Fatal(err)
	}
	if seg := zero.Segment(); seg.From != 3 || seg.Start != 500 {
		t.Errorf("after an exact change at step 3: %+v, want from step 3 at record 500", seg)
	}
}

// TestABatchChangeAtOneStepReadsEachRecordOnce: two replicas whose
// batches change at the same step (the coordinator's rebatch) begin the
// new data segment at the same record, and read no record twice between
// them; had one of them taken the change a step later (the step it had
// read ahead to, as batch changes used to be taken), each would have
// sharded a segment of its own.
func TestABatchChangeAtOneStepReadsEachRecordOnce(t *testing.T) {
	before, after := Share{Members: []int{0, 1}, Batches: []int{4, 4}}, Share{Members: []int{0, 1}, Batches: []int{2, 6}}
	open := func(o data.Options) (data.Source, error) { return data.Open("synthetic:2", o) }
	// read returns the segment each replica ends in and how many records
	// were read more than once, each replica taking the change at its step
	// of changeAt.
	read := func(changeAt [2]int64) (segments [2]Segment, twice int) {
		seen := map[float32]bool{} // a record's true click probability names it
		for replica := range 2 {
			in := &ShardedInput{Replica: replica, Base: data.Options{Split: data.SplitTrain}, Open: open}
			in.Begin(1, 0, before, nil, 1)
			for step := int64(1); step <= 6; step++ {
				share := before
				if step >= changeAt[replica] {
					share = after
				}
				b, err := in.Next(context.Background(), step, share)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range b.Probs {
					if seen[p] {
						twice++
					}
					seen[p] = true
				}
			}
			segments[replica] = in.Segment()
			in.Close()
		}
		return segments, twice
	}
	segs, twice := read([2]int64{3, 3})
	if twice > 0 || segs[0].From != 3 || segs[0].From != segs[1].From || segs[0].Start != segs[1].Start {
		t.Errorf("a change at step 3 on both replicas: %d records read twice, segments from step %d at record %d and from step %d at record %d; want none twice and one segment",
			twice, segs[0].From, segs[0].Start, segs[1].From, segs[1].Start)
	}
	segs, _ = read([2]int64{3, 4})
	if segs[0].Start == segs[1].Start {
		t.Errorf("a change taken at steps 3 and 4: both segments start at record %d: the test cannot tell it from one step", segs[0].Start)
	}
}
