package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/heterps/heterps/config"
)

// Targets of the issue.
const (
	timeRatioTarget  = 1.15 // top H-level dynamic vs the H-1 time
	speedupTarget    = 2.0  // top H-level dynamic vs uniform
	adjustmentTarget = 3    // to equilibrium, and back after interference
	tolerance        = 0.10 // "within 10 %"
	// stepWindow is the least span over which a step time is measured
	// after interference (steps arrive once a heartbeat).
	stepWindow = 3 * time.Second
)

// metrics are what a run's table row shows.
type metrics struct {
	wall, meanStep      time.Duration
	final               []float64
	ideal               []float64
	adjustments         int
	settleStep          int64 // first step within 10 % of the final split; -1 never
	settleAdj           int
	loss                float64
	targetStep          int64 // -1: never reached
	targetTime          time.Duration
	splitVsIdealPercent float64
}

func measure(t *trace, o options, target float64) metrics {
	m := metrics{wall: t.finished.Sub(t.started), settleStep: -1, targetStep: -1, loss: t.final.Loss,
		adjustments: adjustments(t.final.Batching), ideal: idealSplit(t.model.batch, t.shares[:])}
	if t.final.Step > 0 {
		m.meanStep = m.wall / time.Duration(t.final.Step)
	}
	m.final = lastSplit(t.samples)
	if m.final != nil {
		got := []int{int(m.final[0]), int(m.final[1])}
		m.splitVsIdealPercent = 100 * splitError(got, m.ideal)
		if i, ok := firstWithin(t.samples, m.final, tolerance); ok {
			m.settleStep, m.settleAdj = t.samples[i].step, t.samples[i].adjustments
		}
	}
	ema := lossEMA(t.samples, o.emaWeight)
	if i, ok := reached(t.samples, ema, target); ok && !math.IsNaN(target) {
		m.targetStep, m.targetTime = t.samples[i].step, t.samples[i].at.Sub(t.started)
	}
	return m
}

// printAll prints every part's tables and the targets.
func printAll(w io.Writer, res *results, o options) {
	for _, g := range res.groups {
		printLevels(w, g, targetLoss(res, g.model.name, o), o)
	}
	if len(res.interference) > 0 {
		printInterference(w, res.interference, o)
	}
	if len(res.resize) > 0 {
		printResize(w, res.resize, o)
	}
	printTargets(w, res, o)
}

// targetLoss is model's target: its first group's (the first sync mode's)
// H-1 uniform run's loss EMA at --target-at of its steps (NaN when that
// run is missing or failed).
func targetLoss(res *results, model string, o options) float64 {
	for _, g := range res.groups {
		if g.model.name == model {
			return groupTarget(g, o)
		}
	}
	return math.NaN()
}

func groupTarget(g *levelResults, o options) float64 {
	ref := g.get(1, config.BatchingUniform)
	if ref == nil {
		ref = g.get(1, g.modes[0])
	}
	if ref == nil || ref.err != nil {
		return math.NaN()
	}
	loss, ok := lossAtStep(ref.samples, lossEMA(ref.samples, o.emaWeight), targetStep(g.model, o))
	if !ok {
		return math.NaN()
	}
	return loss
}

func targetStep(m modelSpec, o options) int64 { return int64(o.targetAt * float64(m.steps)) }

func printLevels(w io.Writer, g *levelResults, target float64, o options) {
	fmt.Fprintf(w, "%s %s, H-levels (loss: %s; target %.4f: the H-1 %s run's EMA at step %d)\n",
		g.model.name, strings.ToUpper(g.sync), g.model.loss, target, config.BatchingUniform, targetStep(g.model, o))
	fmt.Fprintf(w, "%-3s %-11s %-8s %7s %8s %-10s %-12s %8s %4s %-13s %8s %-15s\n",
		"H", "shares", "mode", "wall s", "step ms", "split", "ideal", "vs ideal", "adj", "settled step", "loss", "target step/s")
	for _, t := range g.all() {
		shares := fmt.Sprintf("%.2f/%.2f", t.shares[0], t.shares[1])
		if t.err != nil {
			fmt.Fprintf(w, "%-3d %-11s %-8s FAILED: %v\n", t.level, shares, t.mode, t.err)
			continue
		}
		m := measure(t, o, target)
		fmt.Fprintf(w, "%-3d %-11s %-8s %7.1f %8.1f %-10s %-12s %7.1f%% %4d %-13s %8.4f %-15s\n",
			t.level, shares, t.mode, m.wall.Seconds(), ms(m.meanStep), splitString(m.final), fmt.Sprintf("%.0f/%.0f", m.ideal[0], m.ideal[1]),
			m.splitVsIdealPercent, m.adjustments, settled(m), m.loss, reachedString(m))
	}
	fmt.Fprintln(w, "split: n0/n1 batches at the end; vs ideal: the largest replica's relative error against the shares' ratio;")
	fmt.Fprintln(w, "settled step: the first step at which the split was within 10 % of its final one (adjustments made by then)")
	fmt.Fprintln(w)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func splitString(s []float64) string {
	if len(s) < 2 {
		return "-"
	}
	return fmt.Sprintf("%.0f/%.0f", s[0], s[1])
}

func settled(m metrics) string {
	if m.settleStep < 0 {
		return "never"
	}
	return fmt.Sprintf("%d (%d adj)", m.settleStep, m.settleAdj)
}

func reachedString(m metrics) string {
	if m.targetStep < 0 {
		return "not reached"
	}
	return fmt.Sprintf("%d / %.1f", m.targetStep, m.targetTime.Seconds())
}

// phase is one part of an interference run: from one throttle to the next.
type phase struct {
	name       string
	from, to   int64 // steps
	fromSample int
	capacity   float64 // total CPU share
}

func phases(t *trace, steps int64) []phase {
	// The before phase starts at the first reported step: the job's
	// start-up is not a step.
	ps := []phase{{name: "before", from: firstStep(t.samples), to: steps, capacity: t.shares[0] + t.shares[1]}}
	shares := t.shares
	for _, th := range t.throttles {
		if th.at.IsZero() {
			break
		}
		ps[len(ps)-1].to = th.atStep
		shares[th.node] = th.share
		name := fmt.Sprintf("n%d at %.2f", th.node, th.share)
		ps = append(ps, phase{name: name, from: th.atStep, to: steps, fromSample: sampleIndexAt(t.samples, th.at), capacity: shares[0] + shares[1]})
	}
	return ps
}

func printInterference(w io.Writer, runs []*trace, o options) {
	fmt.Fprintf(w, "interference (%s %s, H-1 pair; n0's share halved at %d %% of the steps, restored at %d %%)\n",
		runs[0].model.name, strings.ToUpper(runs[0].sync), 30, 60)
	fmt.Fprintf(w, "%-8s %-12s %-13s %8s %11s %4s %-26s\n", "mode", "phase", "steps", "step ms", "balanced ms", "adj", "back within 10 %: steps/adj")
	for _, t := range runs {
		if t.err != nil {
			fmt.Fprintf(w, "%-8s FAILED: %v\n", t.mode, t.err)
			continue
		}
		for _, r := range interferenceRows(t, o) {
			fmt.Fprintf(w, "%-8s %-12s %-13s %8.1f %11.1f %4d %-26s\n", t.mode, r.p.name, fmt.Sprintf("%d-%d", r.p.from, r.p.to), ms(r.mean), ms(r.balanced), r.adj, r.back)
		}
	}
	fmt.Fprintln(w, "balanced: the before phase's step time scaled by the total share (the step time of a perfect split at that capacity);")
	fmt.Fprintf(w, "back within 10 %%: the steps and adjustments from the throttle until the step time over >= %v is within 10 %% of balanced\n\n", stepWindow)
}

type interferenceRow struct {
	p              phase
	mean, balanced time.Duration
	adj            int
	back           string
	backAdj        int
	backOK         bool
}

func interferenceRows(t *trace, o options) []interferenceRow {
	ps := phases(t, t.final.Step)
	var rows []interferenceRow
	var base time.Duration
	for i, p := range ps {
		r := interferenceRow{p: p, mean: meanStepTime(t.samples, p.from, p.to)}
		if i == 0 {
			base = r.mean
		}
		r.balanced = time.Duration(float64(base) * ps[0].capacity / p.capacity)
		r.adj = adjAtStep(t.samples, p.to) - adjAtStep(t.samples, p.from)
		r.back = "-"
		if i > 0 {
			steps, adj, got, ok := backWithin(t.samples, p.fromSample, p.to, r.balanced, tolerance, stepWindow)
			r.backAdj, r.backOK = adj, ok
			r.back = "never"
			if ok {
				r.back = fmt.Sprintf("%d steps, %d adj (%.1f ms)", steps, adj, ms(got))
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// firstStep is the first step > 0 the samples report (1 if none does).
func firstStep(samples []sample) int64 {
	for _, s := range samples {
		if s.step > 0 {
			return s.step
		}
	}
	return 1
}

// adjAtStep is the adjustment count at the first sample at or past step.
func adjAtStep(samples []sample, step int64) int {
	for _, s := range samples {
		if s.step >= step {
			return s.adjustments
		}
	}
	if len(samples) == 0 {
		return 0
	}
	return samples[len(samples)-1].adjustments
}

func printTargets(w io.Writer, res *results, o options) {
	fmt.Fprintln(w, "targets (measured, not asserted):")
	for _, g := range res.groups {
		printLevelTargets(w, g, targetLoss(res, g.model.name, o), o)
	}
	printInterferenceTargets(w, res.interference, o)
	if len(res.resize) > 0 {
		printResizeTarget(w, res.resize)
	}
}

// printLevelTargets prints the H-level targets of one model and sync mode.
func printLevelTargets(w io.Writer, g *levelResults, target float64, o options) {
	name := fmt.Sprintf("%s %s", g.model.name, strings.ToUpper(g.sync))
	top := g.levels[len(g.levels)-1]
	dyn, uni, ref := g.get(top, config.BatchingDynamic), g.get(top, config.BatchingUniform), g.get(1, config.BatchingDynamic)
	if ok(dyn) && ok(ref) {
		md, mr := measure(dyn, o, target), measure(ref, o, target)
		r, what := ratio(md, mr)
		fmt.Fprintf(w, "  %s: H-%d dynamic <= %.2fx the H-1 dynamic time %s: %.2fx (%s): %s\n", name, top, timeRatioTarget, what, r, times(md, mr), verdict(r <= timeRatioTarget))
	} else {
		fmt.Fprintf(w, "  %s: H-%d dynamic <= %.2fx the H-1 time: MISSED (a run is missing or failed)\n", name, top, timeRatioTarget)
	}
	if ok(dyn) && ok(uni) {
		md, mu := measure(dyn, o, target), measure(uni, o, target)
		r, what := ratio(mu, md)
		fmt.Fprintf(w, "  %s: H-%d dynamic >= %.1fx faster than uniform %s: %.2fx (%s): %s\n", name, top, speedupTarget, what, r, times(mu, md), verdict(r >= speedupTarget))
	} else {
		fmt.Fprintf(w, "  %s: H-%d dynamic >= %.1fx faster than uniform: MISSED (a run is missing or failed)\n", name, top, speedupTarget)
	}
	var worst []string
	met := true
	for _, h := range g.levels[1:] {
		t := g.get(h, config.BatchingDynamic)
		if !ok(t) {
			met = false
			worst = append(worst, fmt.Sprintf("H-%d failed", h))
			continue
		}
		m := measure(t, o, target)
		met = met && equilibrated(m)
		worst = append(worst, fmt.Sprintf("H-%d %s", h, settled(m)))
	}
	fmt.Fprintf(w, "  %s: equilibrium (split within 10 %% of its final one, after at least one adjustment) in <= %d adjustments: %s: %s\n",
		name, adjustmentTarget, strings.Join(worst, ", "), verdict(met && len(worst) > 0))
}

// equilibrated says whether a dynamic run above H-1 settled in at most
// adjustmentTarget adjustments; a split that never moved (the uniform
// start) is no equilibrium: the shares differ.
func equilibrated(m metrics) bool {
	return m.adjustments > 0 && m.settleStep >= 0 && m.settleAdj <= adjustmentTarget
}

func printInterferenceTargets(w io.Writer, inter []*trace, o options) {
	for _, t := range inter {
		if t.mode != config.BatchingDynamic {
			continue
		}
		if !ok(t) {
			fmt.Fprintln(w, "  back within 10 % of the balanced step time in <= 3 adjustments after interference: MISSED (the run failed)")
			continue
		}
		var parts []string
		met := true
		for _, r := range interferenceRows(t, o)[1:] {
			parts = append(parts, fmt.Sprintf("%s: %s", r.p.name, r.back))
			met = met && r.backOK && r.backAdj <= adjustmentTarget
		}
		fmt.Fprintf(w, "  back within 10 %% of the balanced step time in <= %d adjustments after interference (dynamic): %s: %s\n", adjustmentTarget, strings.Join(parts, "; "), verdict(met && len(parts) > 0))
	}
}

func ok(t *trace) bool { return t != nil && t.err == nil }

// ratio is a's time over b's: to the target loss when both reached it,
// else the wall time.
func ratio(a, b metrics) (float64, string) {
	if a.targetStep >= 0 && b.targetStep >= 0 && b.targetTime > 0 {
		return a.targetTime.Seconds() / b.targetTime.Seconds(), "to the target loss"
	}
	return a.wall.Seconds() / b.wall.Seconds(), "in wall time (the target loss was not reached by both)"
}

func times(a, b metrics) string {
	return fmt.Sprintf("to target %s vs %s; wall %.1f s vs %.1f s", secs(a), secs(b), a.wall.Seconds(), b.wall.Seconds())
}

func secs(m metrics) string {
	if m.targetStep < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", m.targetTime.Seconds())
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}
