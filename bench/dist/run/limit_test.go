package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The loopback limit counts only the steps that end while every trainer
// runs past its first step, over that window.
func TestTogetherRateCountsTheWindowAllTrainersShare(t *testing.T) {
	at := func(secs ...float64) []time.Time {
		base := time.Unix(1000, 0)
		var out []time.Time
		for _, s := range secs {
			out = append(out, base.Add(time.Duration(s*float64(time.Second))))
		}
		return out
	}
	// A ends a step every second for 10 s; B every second from 0.5 s to
	// 5.5 s. Together: (0.5, 5.5], where A ends 5 steps and B 5.
	a := at(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	b := at(0.5, 1.5, 2.5, 3.5, 4.5, 5.5)
	got, err := togetherRate([][]time.Time{a, b}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := 10.0 * 100 / 5; math.Abs(got-want) > 1e-9 {
		t.Fatalf("togetherRate = %g samples/s, want %g", got, want)
	}
	if _, err := togetherRate([][]time.Time{at(0, 1), at(2, 3)}, 100); err == nil || !strings.Contains(err.Error(), "never ran together") {
		t.Fatalf("trainers one after the other: %v, want an error", err)
	}
	if _, err := togetherRate([][]time.Time{a, at(1)}, 100); err == nil || !strings.Contains(err.Error(), "trainer 1 ended 1 steps") {
		t.Fatalf("a trainer of one step: %v, want an error", err)
	}
}
