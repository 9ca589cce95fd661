package sched

// improve is the trainer's improvement operator (expert iteration): a
// steepest-descent local search on the cost model from an assignment,
// whose result the policy then imitates. It returns the assignment and its
// cost (+Inf when it and every neighbour are infeasible).
func (sr *search) improve(a []int) ([]int, float64) { return sr.descend(a, sr.e.cost) }

// descend is steepest descent on cost from a. Its moves keep the stage
// structure in view: give a whole stage, or a head or a tail of it, another
// type (which merges it into a neighbour of that type, moves a stage
// boundary, or splits the stage), or a run of up to rlImproveRun layers
// inside it (which splits it in three). It stops when no move lowers the
// cost or after rlImprovePasses passes. Every move tried spends one of
// sr.evalsLeft; none left, it returns a unchanged.
func (sr *search) descend(a []int, cost func([]int) float64) ([]int, float64) {
	cur := append([]int(nil), a...)
	c := cost(cur)
	cand := make([]int, len(cur))
	for range rlImprovePasses {
		best, bestCost := []int(nil), c
		try := func() {
			if sr.evalsLeft <= 0 {
				return
			}
			sr.evalsLeft--
			if c := cost(cand); c < bestCost {
				best, bestCost = append(best[:0:0], cand...), c
			}
		}
		segs := Segments(cur)
		for _, s := range segs {
			for t := range sr.p.Types {
				if t == s.Type {
					continue
				}
				copy(cand, cur)
				fill(cand[s.First:s.Last+1], t)
				try()
			}
		}
		for _, s := range segs {
			for m := s.First + 1; m <= s.Last; m++ {
				for t := range sr.p.Types {
					if t == s.Type {
						continue
					}
					copy(cand, cur)
					fill(cand[s.First:m], t)
					try()
					copy(cand, cur)
					fill(cand[m:s.Last+1], t)
					try()
					for w := 1; w <= rlImproveRun && m+w <= s.Last; w++ {
						copy(cand, cur)
						fill(cand[m:m+w], t)
						try()
					}
				}
			}
		}
		if best == nil {
			break
		}
		cur, c = best, bestCost
	}
	return cur, c
}

func fill(a []int, t int) {
	for i := range a {
		a[i] = t
	}
}
