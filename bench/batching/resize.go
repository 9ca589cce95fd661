package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/heterps/heterps/config"
)

// Resize modes of the job file's [batching] resize.
const (
	resizeInPlace     = "in-place"
	resizeKillRestart = "restart"
)

// inPlaceTarget: in-place resizing costs under this fraction of the run.
const inPlaceTarget = 0.01

// resizeLevel is the H-level of the resize comparison (the H-4).
const resizeLevel = 4

// runResize runs m's H-4 dynamic BSP job with checkpoints twice: resizing
// in place, then by kill-restart.
func (b *bench) runResize(ctx context.Context, m modelSpec) []*trace {
	var out []*trace
	for _, r := range []string{resizeInPlace, resizeKillRestart} {
		if ctx.Err() != nil {
			break
		}
		t := &trace{part: partResize, model: m, sync: syncBSP, level: resizeLevel, shares: sharePairs[resizeLevel], mode: config.BatchingDynamic, resize: r}
		b.runOne(ctx, t)
		out = append(out, t)
		fmt.Fprintf(os.Stderr, "bench/batching: resize %s %s: %s\n", m.name, r, t.summary())
	}
	return out
}

// resizeCost is what a resize run's samples say about its resizes.
type resizeCost struct {
	wall         time.Duration
	adjustments  int
	restarts     []restart
	statusCount  int           // the last job's status: restarts
	trainedTwice int64         // steps the restarts trained again
	gaps         time.Duration // from each old job's last step to the new job's first
	inPlace      time.Duration // estimated cost of the in-place resizes
}

func measureResize(t *trace) resizeCost {
	c := resizeCost{wall: t.finished.Sub(t.started), adjustments: adjustments(t.final.Batching),
		restarts: restarts(t.samples), statusCount: t.final.Restarts, inPlace: inPlaceOverhead(t.samples)}
	for _, r := range c.restarts {
		c.trainedTwice += r.trainedTwice()
		c.gaps += r.gap
	}
	return c
}

// fraction is d over the run's wall time (0 when the wall time is).
func (c resizeCost) fraction(d time.Duration) float64 {
	if c.wall <= 0 {
		return 0
	}
	return float64(d) / float64(c.wall)
}

func printResize(w io.Writer, runs []*trace, o options) {
	t0 := runs[0]
	fmt.Fprintf(w, "in-place vs kill-restart resizing (%s BSP, H-%d dynamic, checkpoints every %d steps)\n", t0.model.name, resizeLevel, resizeEvery(t0.model, o))
	fmt.Fprintf(w, "%-9s %7s %4s %8s %-13s %6s %9s %-18s %-10s\n", "resize", "wall s", "adj", "restarts", "trained twice", "gaps s", "restored", "in-place est. s", "split")
	for _, t := range runs {
		if t.err != nil {
			fmt.Fprintf(w, "%-9s FAILED: %v\n", t.resize, t.err)
			continue
		}
		c := measureResize(t)
		fmt.Fprintf(w, "%-9s %7.1f %4d %8s %-13d %6.1f %9s %-18s %-10s\n", t.resize, c.wall.Seconds(), c.adjustments,
			fmt.Sprintf("%d (%d)", len(c.restarts), c.statusCount), c.trainedTwice, c.gaps.Seconds(), restoredSteps(c.restarts),
			fmt.Sprintf("%.2f (%.2f %%)", c.inPlace.Seconds(), 100*c.fraction(c.inPlace)), splitString(lastSplit(t.samples)))
	}
	fmt.Fprintln(w, "restarts: job changes seen (the last job's status.restarts); trained twice: per restart, the step the old job reached")
	fmt.Fprintln(w, "minus the checkpoint step the new one restored from; gaps: from the old job's last reported step to the new one's first;")
	fmt.Fprintln(w, "in-place est.: per heartbeat interval in which the controller adjusted, its time beyond its steps at the slower of the")
	fmt.Fprintln(w, "step times of the intervals around it (0 means the resize hid in the noise of per-heartbeat step times)")
	fmt.Fprintln(w)
}

func resizeEvery(m modelSpec, o options) int {
	if o.every > 0 {
		return o.every
	}
	return max(1, m.steps/5)
}

func restoredSteps(rs []restart) string {
	if len(rs) == 0 {
		return "-"
	}
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprint(r.restored))
	}
	return strings.Join(parts, ",")
}

// printResizeTarget prints the in-place cost against kill-restart's.
func printResizeTarget(w io.Writer, runs []*trace) {
	var inPlace, restart *trace
	for _, t := range runs {
		switch t.resize {
		case resizeInPlace:
			inPlace = t
		case resizeKillRestart:
			restart = t
		}
	}
	if !ok(inPlace) {
		fmt.Fprintln(w, "  in-place resizing < 1 % of run time: MISSED (the in-place run failed)")
		return
	}
	ci := measureResize(inPlace)
	vs := "kill-restart: not measured (the run failed: see its row)"
	if ok(restart) {
		cr := measureResize(restart)
		vs = fmt.Sprintf("kill-restart: %+.1f s wall (%+.1f %%), %d restarts, %d steps trained twice, %.1f s in gaps",
			(cr.wall - ci.wall).Seconds(), 100*ci.fraction(cr.wall-ci.wall), len(cr.restarts), cr.trainedTwice, cr.gaps.Seconds())
	}
	f := ci.fraction(ci.inPlace)
	fmt.Fprintf(w, "  in-place resizing < %.0f %% of run time: %.2f %% (%.2f s over %d adjustments) vs %s: %s\n",
		100*inPlaceTarget, 100*f, ci.inPlace.Seconds(), ci.adjustments, vs, verdict(f < inPlaceTarget))
}
