package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/heterps/heterps/daemon/alloc"
)

// Trace-driven simulation (`heterps sim --trace-dir DIR`): every *.jsonl
// file of DIR is the trace of a real run (alloc.TraceLine) and becomes a
// job kind: its loss curve is the curve fitted to the whole trace, its
// work the trace's last step, its step cost the step model fitted to the
// trace's (units, step seconds). If DIR also holds arrivals.json, the
// simulation replays exactly those jobs (the trace each runs, its arrival
// in seconds and its priority) instead of drawing Poisson arrivals, which
// is how a real run is compared with the simulator (bench/multijob).

// traceMaxUnits is a trace kind's largest useful parallelism unless
// --max-units says otherwise.
const traceMaxUnits = 64

// simArrival is one entry of arrivals.json.
type simArrival struct {
	Trace    string  `json:"trace"` // file name in the trace directory
	Arrival  float64 `json:"arrival"`
	Priority float64 `json:"priority"`
}

// arrivalsFile names the replayed schedule in a trace directory.
const arrivalsFile = "arrivals.json"

// loadTraceDir reads the kinds of a trace directory, by file name, and
// its schedule (nil without arrivals.json).
func loadTraceDir(dir string) (map[string]*jobKind, []simArrival, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, nil, fmt.Errorf("--trace-dir %s: %w", dir, err)
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("--trace-dir %s: no *.jsonl traces", dir)
	}
	kinds := map[string]*jobKind{}
	for _, path := range names {
		k, err := traceKind(path)
		if err != nil {
			return nil, nil, err
		}
		kinds[filepath.Base(path)] = k
	}
	sched, err := readArrivals(filepath.Join(dir, arrivalsFile), kinds)
	return kinds, sched, err
}

// traceKind makes a job kind of the trace at path.
func traceKind(path string) (*jobKind, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lines, err := alloc.ReadTrace(path, f)
	if err != nil {
		return nil, err
	}
	if len(lines) < alloc.MinPoints {
		return nil, fmt.Errorf("%s: %d lines, want at least %d", path, len(lines), alloc.MinPoints)
	}
	var samples []alloc.StepSample
	pts := make([]alloc.Point, 0, len(lines)+1)
	for _, l := range lines {
		pts = append(pts, alloc.Point{Iter: float64(l.Step), Loss: l.Loss})
		if l.StepSeconds > 0 && l.Units > 0 {
			samples = append(samples, alloc.StepSample{Units: l.Units, Seconds: l.StepSeconds})
		}
	}
	step, err := alloc.FitStepModel(samples)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	curve, err := alloc.FitCurve(evenly(pts, 400), alloc.FitOptions{Decay: 1})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// The simulated job starts at iteration 0 from the trace's first loss.
	curve.L0 = lines[0].Loss
	return &jobKind{name: strings.TrimSuffix(filepath.Base(path), ".jsonl"), fitted: &curve,
		iters: float64(lines[len(lines)-1].Step), step: step, maxUnits: traceMaxUnits}, nil
}

// evenly picks at most n points of h spread evenly, the first and last
// included.
func evenly(h []alloc.Point, n int) []alloc.Point {
	if len(h) <= n {
		return h
	}
	out := make([]alloc.Point, 0, n)
	for i := range n {
		out = append(out, h[i*(len(h)-1)/(n-1)])
	}
	return out
}

// readArrivals reads the schedule at path, if there is one.
func readArrivals(path string, kinds map[string]*jobKind) ([]simArrival, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var sched []simArrival
	if err := json.Unmarshal(raw, &sched); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(sched) == 0 {
		return nil, fmt.Errorf("%s: no jobs", path)
	}
	for i, a := range sched {
		switch {
		case kinds[a.Trace] == nil:
			return nil, fmt.Errorf("%s: job %d: no trace %q in the directory", path, i, a.Trace)
		case !(a.Arrival >= 0) || a.Priority < 0:
			return nil, fmt.Errorf("%s: job %d: arrival %v, priority %v: want non-negative", path, i, a.Arrival, a.Priority)
		}
	}
	slices.SortStableFunc(sched, func(a, b simArrival) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
	return sched, nil
}

// useTraces makes c simulate the traces of dir.
func (c *simConfig) useTraces(dir string) error {
	kinds, sched, err := loadTraceDir(dir)
	if err != nil {
		return err
	}
	c.kinds = c.kinds[:0]
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		c.kinds = append(c.kinds, *kinds[name])
	}
	c.schedule = nil
	for _, a := range sched {
		c.schedule = append(c.schedule, scheduled{kind: kinds[a.Trace], arrival: a.Arrival, priority: a.Priority})
	}
	if len(c.schedule) > 0 {
		c.Jobs = len(c.schedule)
	}
	return nil
}
