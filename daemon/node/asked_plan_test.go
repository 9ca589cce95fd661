package node

import (
	"context"
	"testing"
	"time"
)

// TestCheckpointPlanTakesTheEarlierOfPeriodicAndAsked: the checkpoint
// loop's next step is the next periodic one or the step asked for,
// whichever comes first after the last taken; an ask already passed is
// ignored, and with no interval only asks are due.
func TestCheckpointPlanTakesTheEarlierOfPeriodicAndAsked(t *testing.T) {
	for _, c := range []struct {
		every, steps, done, asked int64
		step                      int64
		isAsked                   bool
	}{
		{100, 1000, 0, 0, 100, false},
		{100, 1000, 100, 150, 150, true},
		{100, 1000, 150, 150, 200, false},
		{100, 1000, 100, 200, 200, true},
		{100, 1000, 100, 250, 200, false},
		{100, 950, 900, 0, 950, false},
		{0, 1000, 0, 0, 0, false},
		{0, 1000, 40, 70, 70, true},
		{0, 1000, 70, 70, 0, false},
	} {
		step, isAsked := checkpointPlan{every: c.every, steps: c.steps, done: c.done}.next(c.asked)
		if step != c.step || isAsked != c.isAsked {
			t.Errorf("every %d, done %d, asked %d: step %d (asked %v), want %d (%v)", c.every, c.done, c.asked, step, isAsked, c.step, c.isAsked)
		}
	}
}

// TestAsksKeepTheLatestAndWake: an ask later than the latest is kept and
// wakes the loop once; an earlier or equal one changes nothing.
func TestAsksKeepTheLatestAndWake(t *testing.T) {
	k := newAsks(10)
	if k.ask(10) || k.ask(5) {
		t.Fatal("an ask no later than the latest was taken")
	}
	if !k.ask(20) || !k.ask(30) || k.latest() != 30 {
		t.Fatalf("latest %d after asks of 20 and 30", k.latest())
	}
	select {
	case <-k.note:
	default:
		t.Fatal("no wake-up after an ask")
	}
	select {
	case <-k.note:
		t.Fatal("two wake-ups for asks the loop had not looked at")
	default:
	}
}

// TestUntilAskedEndsOnlyForAnEarlierAsk: the wait for a step ends when a
// step before it is asked for, and says so; an ask for a later step, or
// the wait's own release, does not count as one.
func TestUntilAskedEndsOnlyForAnEarlierAsk(t *testing.T) {
	k := newAsks(0)
	ctx, release := untilAsked(context.Background(), k, 10, 50)
	k.ask(60)
	select {
	case <-ctx.Done():
		t.Fatal("an ask for a later step ended the wait")
	case <-time.After(50 * time.Millisecond):
	}
	if release() {
		t.Fatal("a released wait says an ask cut it")
	}
	ctx, release = untilAsked(context.Background(), k, 10, 70)
	k.ask(65)
	<-ctx.Done()
	if !release() {
		t.Fatal("a wait an earlier ask ended does not say so")
	}
}
