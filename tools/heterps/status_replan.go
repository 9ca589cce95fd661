package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/heterps/heterps/daemon/api"
)

// printReplans shows what re-planning from measured throughput did: the
// per-type factors on the profile's times, the chain's measured cost
// beside the first plan's prediction for the same steps, and each
// re-plan with its step, the predicted cost of the rest of the run on the
// old and the new plan, the gain and how the job moved.
func printReplans(w io.Writer, r *api.ReplanStatus) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "  re-planning: factors %s (%d measurement(s)); cost so far %.4g measured, %.4g by the first plan (%.4g for the run); move start-up %.3g s\n",
		formatScales(r.Scales), r.Samples, r.MeasuredCost, r.FirstPlanCost, r.FirstPlanTotal, r.MoveSeconds)
	if len(r.Replans) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    step\tfrom\tmove\told cost\tnew cost\tgain\tfactors\tplan\tjob")
	for _, p := range r.Replans {
		to := p.Job
		if p.NewJob != "" {
			to += " -> " + p.NewJob
		}
		fmt.Fprintf(tw, "    %d\t%d\t%s\t%.4g\t%.4g\t%.1f%%\t%s\t%s -> %s\t%s\n", p.Step, p.FromStep, p.Move, p.OldCost, p.NewCost,
			100*p.Gain, formatScales(p.Scales), planShape(p.OldAssign, p.OldUnits), planShape(p.NewAssign, p.NewUnits), to)
	}
	tw.Flush()
}

// formatScales is "cpu x0.5, gpu x1", types in name order; "none" when
// nothing was measured.
func formatScales(scales map[string]float64) string {
	if len(scales) == 0 {
		return "none"
	}
	var parts []string
	for _, typ := range slices.Sorted(maps.Keys(scales)) {
		parts = append(parts, fmt.Sprintf("%s x%.3g", typ, scales[typ]))
	}
	return strings.Join(parts, ", ")
}

// planShape is a plan's stages as "gpu[0-4]:1 cpu[5-6]:2" (type, layers,
// units) from its assignment and stage units.
func planShape(assign []string, units []int) string {
	var parts []string
	for l := 0; l < len(assign); {
		first := l
		for l < len(assign) && assign[l] == assign[first] {
			l++
		}
		u := "?"
		if i := len(parts); i < len(units) {
			u = fmt.Sprint(units[i])
		}
		parts = append(parts, fmt.Sprintf("%s[%d-%d]:%s", assign[first], first, l-1, u))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
