package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// bestRuns alternates the methods, keeps each one's fastest run and
// every figure in the order run, and stops at the first failure naming
// the method.
func TestBestRunsAlternatesAndKeepsTheFastest(t *testing.T) {
	rates := map[string][]float64{"ps": {50, 70, 60}, "allreduce": {80, 75, 90}}
	var order []string
	o := options{denseSync: []string{"ps", "allreduce"}, repeats: 3, timeout: 1e9}
	runs, err := bestRuns(context.Background(), o, func(_ context.Context, sync string) (*outcome, error) {
		order = append(order, sync)
		r := rates[sync][0]
		rates[sync] = rates[sync][1:]
		return &outcome{samplesPerS: r}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ps", "allreduce", "ps", "allreduce", "ps", "allreduce"}; !slices.Equal(order, want) {
		t.Fatalf("ran %v, want %v", order, want)
	}
	if runs[0].best.samplesPerS != 70 || runs[1].best.samplesPerS != 90 {
		t.Fatalf("best %v and %v, want 70 and 90", runs[0].best.samplesPerS, runs[1].best.samplesPerS)
	}
	if got := runs[1].rates(); got != "3: 80 75 90" {
		t.Fatalf("rates %q", got)
	}
	_, err = bestRuns(context.Background(), o, func(_ context.Context, sync string) (*outcome, error) {
		if sync == "allreduce" {
			return nil, errors.New("node died")
		}
		return &outcome{samplesPerS: 1}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "dense_sync allreduce: node died") {
		t.Fatalf("got %v", err)
	}
}
