package data

import (
	"context"
	"testing"
)

// A source opened at Start emits the records a source from 0 emits from
// there on, and After says where a reader has got to after n records.
func TestStartAndAfterAgreeWithReading(t *testing.T) {
	ctx := context.Background()
	base := Options{Shard: 1, Shards: 3, Split: SplitTrain}
	whole, err := Open("synthetic:4", base)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	first, err := whole.Next(ctx, 40)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := whole.Next(ctx, 25)
	if err != nil {
		t.Fatal(err)
	}
	at, err := base.After(40)
	if err != nil {
		t.Fatal(err)
	}
	if at <= 3*40 || at%3 != 2 {
		t.Fatalf("After(40) = %d: want past 120 (some records are held out) and just past a record of shard 1", at)
	}
	resumed := base
	resumed.Start = at
	src, err := Open("synthetic:4", resumed)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	got, err := src.Next(ctx, 25)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rest.Labels {
		if got.Labels[i] != rest.Labels[i] || got.Dense[i] != rest.Dense[i] {
			t.Fatalf("record %d from Start %d differs from the uninterrupted stream", i, at)
		}
	}
	if first.Size != 40 {
		t.Fatal(first.Size)
	}
	if p, _ := base.After(0); p != 0 {
		t.Errorf("After(0) = %d, want Start 0", p)
	}
}

// TestMarkBeforeCountsWhatAfterPassesOver: markBefore finds the furthest
// mark at or before the last of left kept records (After's end), or the
// last mark when they reach past it, and counts the kept records below
// it, as a record-by-record count does — for shards, splits and starts.
func TestMarkBeforeCountsWhatAfterPassesOver(t *testing.T) {
	smallMarks(t)
	const last = 20 // marks up to record 160
	for _, o := range []Options{{}, {Shard: 2, Shards: 3}, {Split: SplitTrain, EvalFraction: 0.3, Start: 17}, {Split: SplitEval, Shard: 1, Shards: 2, Start: 5}} {
		o, err := o.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		for _, left := range []int64{1, 2, 7, 30, 100, 1000} {
			end, err := o.After(left)
			if err != nil {
				t.Fatal(err)
			}
			wantJ := min((end-1)/indexEvery, last)
			wantBelow := int64(0)
			for i := int64(0); i < wantJ*indexEvery; i++ {
				if o.keeps(i) {
					wantBelow++
				}
			}
			if j, below := o.markBefore(left, last); j != wantJ || below != wantBelow {
				t.Errorf("%+v, %d records: mark %d with %d below, want mark %d with %d", o, left, j, below, wantJ, wantBelow)
			}
		}
	}
}
