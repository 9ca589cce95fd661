package pipeline

import (
	"fmt"

	"github.com/heterps/heterps/daemon/batching"
)

// Lanes. A stage of one replica that feeds a stage of R replicas splits
// each micro-batch's rows among them. By default the pieces are near-equal
// (chunks); when the stage's Share names the partners' batches (Share.Next,
// one per partner: the job's lane batches), partner k gets Next[k] rows of
// the step in all, which is what lets the batch controller give lane k of a
// pipeline its own batch. The split goes micro-batch by micro-batch, in
// order: micro-batch m's rows go in proportion to what each partner has
// still to get, within bounds that leave every partner at least a row in
// each micro-batch to come and its exact total at the last.

// rowSplit splits a step's micro-batches among the partners' batches.
type rowSplit struct {
	left     []int // rows each partner has still to get this step
	rowsLeft int   // their sum
	micros   int   // micro-batches still to split
}

func newRowSplit(batches []int, micros int) *rowSplit {
	s := &rowSplit{left: append([]int(nil), batches...), micros: micros}
	for _, b := range batches {
		s.rowsLeft += b
	}
	return s
}

// next returns the bounds of the partners' pieces of the next micro-batch,
// of rows rows.
func (s *rowSplit) next(rows int) ([]int, error) {
	n := len(s.left)
	if s.micros < 1 || rows > s.rowsLeft {
		return nil, fmt.Errorf("%d rows in a micro-batch, the partners' batches %v leave %d", rows, s.left, s.rowsLeft)
	}
	for k, l := range s.left {
		if l < s.micros {
			return nil, fmt.Errorf("partner %d has %d rows left for %d micro-batches: each needs a row", k, l, s.micros)
		}
	}
	s.micros--
	lo, hi := make([]int, n), make([]int, n)
	weights := make([]float64, n)
	for k, l := range s.left {
		lo[k] = max(l-(s.rowsLeft-rows), 1) // the rest must fit the later micro-batches
		hi[k] = l - s.micros                // and leave a row for each of them
		weights[k] = float64(l)
	}
	pieces, err := batching.Split(rows, weights, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("split %d rows among partners with %v rows left: %w", rows, s.left, err)
	}
	bounds := make([]int, n+1)
	for k, p := range pieces {
		if p < 1 {
			return nil, fmt.Errorf("partner %d would get no rows of a micro-batch of %d (batches left %v)", k, rows, s.left)
		}
		s.left[k] -= p
		bounds[k+1] = bounds[k] + p
	}
	s.rowsLeft -= rows
	return bounds, nil
}
