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
// as heterps run deals them to one-thread daemons; others are not pinned.
func TestTrainerCPUDealsTheCPUsInTurn(t *testing.T) {
	var got []int
	for i := range 4 {
		cpu, ok := trainerCPU(i, 1, []int{2, 5})
		if !ok {
			t.Fatalf("trainer %d of one thread on 2 CPUs: not pinned", i)
		}
		got = append(got, cpu)
	}
	if want := []int{2, 5, 2, 5}; !slices.Equal(got, want) {
		t.Fatalf("4 trainers on CPUs 2 and 5: %v, want %v", got, want)
	}
	if _, ok := trainerCPU(0, 2, []int{0, 1, 2, 3}); ok {
		t.Fatal("a 2-thread trainer pinned by the deal; its backend pins itself")
	}
	if _, ok := trainerCPU(1, 1, []int{0}); ok {
		t.Fatal("a trainer pinned where there is one CPU to share")
	}
}

// pinThreadTo binds the calling thread to the one CPU and unpin gives it
// the CPUs it had back.
func TestPinThreadToBindsAndRestores(t *testing.T) {
	allowed, err := cpuset.Allowed()
	if err != nil || len(allowed) < 2 {
		t.Skipf("needs 2 or more CPUs known to the process (%v, %v)", allowed, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		unpin := pinThreadTo(allowed[1])
		if now, err := cpuset.Allowed(); err != nil || !slices.Equal(now, allowed[1:2]) {
			t.Errorf("pinned thread may run on %v (%v), want [%d]", now, err, allowed[1])
		}
		unpin()
		if now, err := cpuset.Allowed(); err != nil || !slices.Equal(now, allowed) {
			t.Errorf("after unpin the thread may run on %v (%v), want %v", now, err, allowed)
		}
	}()
	<-done
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
