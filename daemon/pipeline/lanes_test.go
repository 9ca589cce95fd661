package pipeline

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
)

// TestSplitByLaneBatches: a stage of one replica that feeds two, with lane
// batches (3, 5) of 8 in its Share, sends them 3 and 5 rows of each step
// (over one micro-batch or two), and BSP training still equals
// single-process training on the stacked batch (tolerance as
// TestReplicasWithUnequalBatchesEqualStackedBatch).
func TestSplitByLaneBatches(t *testing.T) {
	checkLeaks(t)
	const steps, tolerance = 4, 2e-6
	cfg := modelConfig(t, sgdMomentum)
	batch := func(step int64) *data.Batch { return testBatch(50, uint64(step), 8) }
	ref, _ := reference(t, cfg, steps, batch)
	for _, micro := range []int{1, 2} {
		j := newJob(t, cfg, []Range{{0, 2}, {3, 5}}, []int{1, 2}, steps, ps.BSP)
		j.micro = micro
		j.shares = []Share{{Members: []int{0}, Batches: []int{8}, Next: []int{3, 5}}, {Members: []int{0, 1}, Batches: []int{3, 5}}}
		ws := j.workers(func(int) func(context.Context, int64) (*data.Batch, error) { return fixedBatches(batch) })
		j.train(ws, 1, steps)
		// A later stage took each step's share when the step began: a
		// resize reaches it from its next step, never one it has run.
		if from, err := ws[1][0].Resize(2, Share{Members: []int{0, 1}, Batches: []int{4, 4}}); err != nil || from != steps+1 {
			t.Errorf("stage 1 resized from step 2 after step %d: from %d (%v), want %d", steps, from, err, steps+1)
		}
		if got := j.rows[1]; !slices.Equal(got, []int{3, 5}) {
			t.Errorf("%d micro-batches: stage 1's replicas got %v rows a step, want the lane batches [3 5]", micro, got)
		}
		d := j.maxDiff(ref)
		t.Logf("%d micro-batches: largest difference from single-process training: %g", micro, d)
		if d > tolerance || math.IsNaN(d) {
			t.Fatalf("%d micro-batches: parameters differ from single-process training by %g, tolerance %g", micro, d, tolerance)
		}
	}
}

// TestRowSplitKeepsTotalsAndRows: micro-batch by micro-batch the pieces
// add up to each partner's batch, and every partner gets a row of every
// micro-batch; a split that cannot is refused, never cut short.
func TestRowSplitKeepsTotalsAndRows(t *testing.T) {
	for _, tc := range []struct {
		batches, micros []int
	}{
		{[]int{3, 5}, []int{8}},
		{[]int{3, 5}, []int{4, 4}},
		{[]int{2, 9, 5}, []int{8, 8}},
		{[]int{4, 9, 5}, []int{5, 5, 4, 4}},
		{[]int{20, 1000}, []int{255, 255, 255, 255}},
		{[]int{4, 2}, []int{3, 3}},
	} {
		s := newRowSplit(tc.batches, len(tc.micros))
		got := make([]int, len(tc.batches))
		for _, rows := range tc.micros {
			bounds, err := s.next(rows)
			if err != nil {
				t.Fatalf("%v over %v: %v", tc.batches, tc.micros, err)
			}
			for k := range got {
				if bounds[k+1]-bounds[k] < 1 {
					t.Fatalf("%v over %v: partner %d gets no rows: %v", tc.batches, tc.micros, k, bounds)
				}
				got[k] += bounds[k+1] - bounds[k]
			}
			if bounds[len(got)] != rows {
				t.Fatalf("%v over %v: pieces %v of %d rows", tc.batches, tc.micros, bounds, rows)
			}
		}
		if !slices.Equal(got, tc.batches) {
			t.Errorf("%v over micro-batches %v: partners got %v", tc.batches, tc.micros, got)
		}
	}
	if _, err := newRowSplit([]int{1, 7}, 2).next(4); err == nil {
		t.Error("a partner of batch 1 over 2 micro-batches: no error")
	}
}
