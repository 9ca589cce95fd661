package main

import (
	"slices"
	"strings"

	"github.com/heterps/heterps/daemon/sched"
)

// sourcesLine says where a plan's layer times came from, type by type, and
// which dense_sync's synchronisation a measured type's include (denseSync,
// sched.Plan.DenseSync): "measured on cpu (allreduce sync); estimated
// (roofline) on gpu, v100", or "" for a plan without sources.
func sourcesLine(sources, denseSync map[string]string) string {
	by := map[string][]string{}
	var kinds []string
	for typ, src := range sources {
		if _, seen := by[src]; !seen {
			kinds = append(kinds, src)
		}
		by[src] = append(by[src], typ)
	}
	order := []string{sched.SourceMeasured, sched.SourceEstimated, sched.SourceGiven}
	slices.SortFunc(kinds, func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		if ia < 0 {
			ia = len(order)
		}
		if ib < 0 {
			ib = len(order)
		}
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		names := by[k]
		slices.Sort(names)
		for i, n := range names {
			if m := denseSync[n]; m != "" && k == sched.SourceMeasured {
				names[i] = n + " (" + m + " sync)"
			}
		}
		label := k
		switch k {
		case sched.SourceEstimated:
			label = "estimated (roofline)"
		case sched.SourceGiven:
			label = "given by the problem file"
		}
		parts = append(parts, label+" on "+strings.Join(names, ", "))
	}
	return strings.Join(parts, "; ")
}
