package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// alternate runs the arms in turn each round (so that the single process a
// job is held against runs between its runs, not before all of them),
// keeps each arm's fastest run and every figure in the order run, and
// stops at the first failure naming the arm.
func TestAlternateInterleavesTheArmsAndKeepsTheFastest(t *testing.T) {
	rates := map[string][]float64{"single": {100, 120, 110}, "ps": {50, 70, 60}, "allreduce": {80, 75, 90}}
	var order []string
	ran := map[string]int{}
	arms := func(fail string) []arm {
		var out []arm
		for _, name := range []string{"single", "ps", "allreduce"} {
			out = append(out, arm{name: name, run: func(context.Context) (*outcome, error) {
				if name == fail {
					return nil, errors.New("node died")
				}
				order = append(order, name)
				defer func() { ran[name]++ }()
				return &outcome{samplesPerS: rates[name][ran[name]%3]}, nil
			}})
		}
		return out
	}
	runs, err := alternate(context.Background(), 3, time.Second, arms(""))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"single", "ps", "allreduce", "single", "ps", "allreduce", "single", "ps", "allreduce"}
	if !slices.Equal(order, want) {
		t.Fatalf("ran %v, want %v", order, want)
	}
	if runs[0].best.samplesPerS != 120 || runs[1].best.samplesPerS != 70 || runs[2].best.samplesPerS != 90 {
		t.Fatalf("best %v, %v and %v, want 120, 70 and 90", runs[0].best.samplesPerS, runs[1].best.samplesPerS, runs[2].best.samplesPerS)
	}
	if got := runs[2].rates(); got != "3: 80 75 90" {
		t.Fatalf("rates %q", got)
	}
	if _, err := alternate(context.Background(), 3, time.Second, arms("allreduce")); err == nil || !strings.Contains(err.Error(), "allreduce: node died") {
		t.Fatalf("got %v", err)
	}
}

// An n-node block holds its jobs against the single process and the
// loopback limit of its own rounds: the figures and ratios printed are of
// those runs.
func TestNodesBlockHoldsEachJobAgainstItsOwnRounds(t *testing.T) {
	fixed := func(name string, r float64) arm {
		return arm{name: name, run: func(context.Context) (*outcome, error) {
			return &outcome{samplesPerS: r, steps: 10, jobSeconds: 1, wallSeconds: 2}, nil
		}}
	}
	o := options{denseSync: []string{"ps", "allreduce"}, repeats: 2, timeout: time.Second}
	var w strings.Builder
	arms := []arm{fixed("single process, 2 threads", 100), fixed("loopback limit of 2 nodes", 120), fixed("dense_sync ps", 80), fixed("dense_sync allreduce", 90)}
	if _, err := nodesBlock(context.Background(), o, arms, 2, 512, "cpu-1t", 1000, &w); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"single process, 2 threads:      100 samples/s (best of 2: 100 100)",
		"loopback limit, 2 unsynchronised trainers", "0.80x the single process beside it (0.80x: the median of the rounds' ratios), 0.67 of the loopback limit",
		"0.90x the single process beside it (0.90x: the median of the rounds' ratios), 0.75 of the loopback limit"} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, w.String())
		}
	}
	w.Reset()
	if _, err := nodesBlock(context.Background(), o, []arm{arms[0], arms[2], arms[3]}, 1, 512, "cpu-2t", 1000, &w); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(w.String(), "loopback limit") || !strings.Contains(w.String(), "0.90x the single process beside it (0.90x: the median of the rounds' ratios), loss") {
		t.Errorf("a 1-node block:\n%s", w.String())
	}
}
