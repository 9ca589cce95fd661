package main

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/internal/cpuset"
)

// One-thread trainers of the loopback limit get the allowed CPUs in turn,
// as heterps run deals them to one-thread daemons; others are not pinned,
// and unpin gives the thread its CPUs back.
func TestPinTrainerDealsTheCPUsInTurn(t *testing.T) {
	allowed, err := cpuset.Allowed()
	if err != nil || len(allowed) < 2 {
		t.Skipf("needs 2 or more CPUs known to the process (%v, %v)", allowed, err)
	}
	on := func(i, threads int) []int {
		var got []int
		done := make(chan struct{})
		go func() { // a thread of its own, unpinned or not
			defer close(done)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			unpin := pinTrainer(i, threads)
			got, _ = cpuset.Allowed()
			unpin()
			if after, _ := cpuset.Allowed(); !slices.Equal(after, allowed) {
				t.Errorf("trainer %d of %d threads: after unpin the thread may run on %v, want %v", i, threads, after, allowed)
			}
		}()
		<-done
		return got
	}
	for i := range len(allowed) + 2 {
		if got, want := on(i, 1), allowed[i%len(allowed):i%len(allowed)+1]; !slices.Equal(got, want) {
			t.Errorf("one-thread trainer %d may run on %v, want %v", i, got, want)
		}
	}
	if got := on(0, 2); !slices.Equal(got, allowed) {
		t.Errorf("a 2-thread trainer may run on %v, want every allowed CPU %v: its backend pins itself", got, allowed)
	}
}

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
