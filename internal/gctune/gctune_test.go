package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

func TestPercentKeepsTheGoalAtLeastHeadroomAboveTheLiveHeap(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{30 * mib, 256 * mib, 854},  // goal 30 + 256.2 MiB
		{128 * mib, 256 * mib, 200}, // goal 384 MiB
		{256 * mib, 256 * mib, 100},
		{4096 * mib, 256 * mib, 100}, // GOGC's own goal is larger
		{0, 256 * mib, maxPercent},
		{1, 256 * mib, maxPercent},
	} {
		if got := Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d MiB live, %d MiB headroom) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}

func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// runFor runs Run over a few collections, then stops it and reports the
// percentage it had set.
func runFor(t *testing.T, headroom uint64, gogcSet bool) (during, after int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { Run(ctx, headroom, gogcSet) })
	time.Sleep(20 * time.Millisecond)
	collect()
	during = gcPercent()
	cancel()
	wg.Wait()
	return during, gcPercent()
}

// collect runs two collections and lets the finalizers of the first run.
func collect() {
	for range 2 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// A test binary's live heap is a few MiB: with 1 GiB of headroom the
// collector's percentage rises far above 100, and falls back when Run
// ends.
func TestRunRaisesThePercentageForASmallHeapAndRestoresIt(t *testing.T) {
	runtime.GC()
	before := gcPercent()
	during, after := runFor(t, 1<<30, false)
	if during < 1000 {
		t.Errorf("percentage %d while Run ran with 1 GiB of headroom over a few MiB live, want >= 1000", during)
	}
	if after != before {
		t.Errorf("percentage %d after Run, want %d as before", after, before)
	}
}

func TestRunLeavesAnOperatorsGOGCAndAZeroHeadroomAlone(t *testing.T) {
	before := gcPercent()
	for _, c := range []struct {
		headroom uint64
		gogcSet  bool
	}{{1 << 30, true}, {0, false}} {
		if during, _ := runFor(t, c.headroom, c.gogcSet); during != before {
			t.Errorf("headroom %d, GOGC set %v: percentage %d, want %d untouched", c.headroom, c.gogcSet, during, before)
		}
	}
}

// A second Run while one is under way leaves the percentage to the first,
// so that the first's restore is the last word.
func TestOneRunAtATime(t *testing.T) {
	before := gcPercent()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { Run(ctx, 1<<30, false) })
	time.Sleep(20 * time.Millisecond)
	first := gcPercent()
	second := make(chan struct{})
	go func() { Run(context.Background(), 1<<20, false); close(second) }()
	select {
	case <-second:
	case <-time.After(5 * time.Second):
		t.Fatal("a second Run did not return while the first ran")
	}
	if got := gcPercent(); got != first {
		t.Errorf("percentage %d after a second Run, want the first's %d", got, first)
	}
	cancel()
	wg.Wait()
	if got := gcPercent(); got != before {
		t.Errorf("percentage %d after both, want %d", got, before)
	}
}

// The percentage follows the live heap from one collection to the next: a
// heap that grows past the headroom goes back to GOGC's 100 at the next
// collection, and rises again once it shrinks.
func TestRunFollowsTheLiveHeapAtEveryCollection(t *testing.T) {
	const headroom = 32 << 20
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { Run(ctx, headroom, false) })
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(20 * time.Millisecond)
	collect()
	if p := gcPercent(); p < 200 {
		t.Fatalf("percentage %d over a test's small heap with 32 MiB of headroom, want >= 200", p)
	}
	big := make([]byte, 96<<20) // live across the collections below
	for i := range big {
		big[i] = byte(i)
	}
	collect()
	if p := gcPercent(); p != 100 {
		t.Errorf("percentage %d with 96 MiB live and 32 MiB of headroom, want 100", p)
	}
	runtime.KeepAlive(big)
	big = nil
	collect()
	if p := gcPercent(); p < 200 {
		t.Errorf("percentage %d once the 96 MiB are garbage, want >= 200 again", p)
	}
}
