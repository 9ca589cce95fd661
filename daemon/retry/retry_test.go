package retry

import (
	"context"
	"testing"
	"time"
)

// TestWaitsStayWithinBounds: over many runs every jittered wait lies in
// [Min, Max], the waits grow to Max, and they are not all alike (jitter).
func TestWaitsStayWithinBounds(t *testing.T) {
	for _, p := range []Policy{
		{Min: 5 * time.Millisecond, Max: time.Second},
		{Min: 20 * time.Millisecond, Max: 2 * time.Second},
		{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		{Min: time.Millisecond, Max: 2 * time.Millisecond}, // narrower than the jitter
	} {
		firsts := map[time.Duration]bool{}
		reachedMax := false
		for range 200 {
			b := p.Start()
			for i := range 30 {
				d, ok := b.Next()
				if !ok {
					t.Fatalf("%+v: gave up without GiveUp", p)
				}
				if d < p.Min || d > p.Max {
					t.Fatalf("%+v: wait %d is %s, outside [%s, %s]", p, i, d, p.Min, p.Max)
				}
				if i == 0 {
					firsts[d] = true
				}
				reachedMax = reachedMax || d > p.Max*2/3
			}
		}
		if len(firsts) < 10 {
			t.Errorf("%+v: 200 runs drew %d distinct first waits: no jitter", p, len(firsts))
		}
		if !reachedMax {
			t.Errorf("%+v: 30 waits never came near Max", p)
		}
	}
}

// TestWaitsGrow: the jittered waits of a run double on average.
func TestWaitsGrow(t *testing.T) {
	p := Policy{Min: time.Millisecond, Max: time.Hour}
	var sum [6]time.Duration
	for range 100 {
		b := p.Start()
		for i := range sum {
			d, _ := b.Next()
			sum[i] += d
		}
	}
	for i := 1; i < len(sum); i++ {
		if r := float64(sum[i]) / float64(sum[i-1]); r < 1.5 || r > 2.5 {
			t.Errorf("mean wait %d / wait %d = %.2f, want about 2", i, i-1, r)
		}
	}
}

// TestResetStartsAgainFromMin: after Reset the next wait is a first one.
func TestResetStartsAgainFromMin(t *testing.T) {
	p := Policy{Min: 10 * time.Millisecond, Max: time.Hour}
	b := p.Start()
	for range 10 {
		b.Next()
	}
	b.Reset()
	if d, _ := b.Next(); d > 3*p.Min {
		t.Errorf("first wait after Reset is %s, want at most %s", d, 3*p.Min)
	}
}

// TestGiveUpCutsTheLastWait: the waits of a run with GiveUp end at it,
// and the run ends once it has passed.
func TestGiveUpCutsTheLastWait(t *testing.T) {
	p := Policy{Min: 10 * time.Millisecond, Max: time.Hour, GiveUp: 25 * time.Millisecond}
	b := p.Start()
	start := time.Now()
	var total time.Duration
	for b.Wait(context.Background()) {
		if total = time.Since(start); total > time.Minute {
			t.Fatal("no give-up")
		}
	}
	if total := time.Since(start); total < p.GiveUp {
		t.Errorf("gave up after %s, before GiveUp %s", total, p.GiveUp)
	}
	if d, ok := b.Next(); ok {
		t.Errorf("after GiveUp Next is %s, true", d)
	}
}

// TestWaitEndsWithTheContext: Wait returns false at once for an ended
// context.
func TestWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := Policy{Min: time.Hour, Max: time.Hour}.Start()
	if b.Wait(ctx) {
		t.Error("Wait returned true for a cancelled context")
	}
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Errorf("Sleep: %v, want context.Canceled", err)
	}
}
