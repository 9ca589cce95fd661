// Package retry is heterps' one backoff between tries: exponential waits
// with jitter, from github.com/cenkalti/backoff/v4, kept within a policy's
// bounds. The wire listener and transport, the node's registration and the
// coordinator client (CLI) wait through it.
//
// Jitter spreads the retries of many peers that failed together (every
// node of a cluster redialling a restarted coordinator or peer) instead of
// having them hit it in lockstep, which the hand-written doublings did.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy bounds the waits of a run of retries.
type Policy struct {
	Min, Max time.Duration // every wait lies in [Min, Max], growing about twofold a try
	// GiveUp, when positive, ends the run once it has lasted that long
	// since its first wait; the last wait is cut to end at GiveUp.
	GiveUp time.Duration
}

// jitter is the randomization factor: a wait is the exponential interval
// times a uniform draw from [1-jitter, 1+jitter].
const jitter = 0.5

// Backoff is the waits of one run of retries. It is not safe for
// concurrent use.
type Backoff struct {
	p     Policy
	exp   *backoff.ExponentialBackOff
	since time.Time // the first Next of the run; zero before it
}

// Start begins a run of retries under p.
func (p Policy) Start() *Backoff {
	// The interval runs from Min/(1-jitter) up to Max/(1+jitter), so that
	// its jittered draws lie in [Min, Max]; clamp covers the rounding and
	// policies too narrow for that (Max < 3 Min).
	first := time.Duration(float64(p.Min) / (1 - jitter))
	exp := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(max(first, time.Nanosecond)),
		backoff.WithMaxInterval(max(first, time.Duration(float64(p.Max)/(1+jitter)))),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(jitter),
		backoff.WithMaxElapsedTime(0), // GiveUp is Backoff's: it cuts the last wait
	)
	return &Backoff{p: p, exp: exp}
}

// Next returns the next wait; false when the run has lasted GiveUp.
func (b *Backoff) Next() (time.Duration, bool) {
	now := time.Now()
	if b.since.IsZero() {
		b.since = now
	}
	d := min(max(b.exp.NextBackOff(), b.p.Min), b.p.Max)
	if b.p.GiveUp > 0 {
		left := b.p.GiveUp - now.Sub(b.since)
		if left <= 0 {
			return 0, false
		}
		d = min(d, left)
	}
	return d, true
}

// Reset starts the run afresh: a try succeeded.
func (b *Backoff) Reset() {
	b.exp.Reset()
	b.since = time.Time{}
}

// Wait sleeps for the next wait; false when ctx ended first or the run
// has lasted GiveUp.
func (b *Backoff) Wait(ctx context.Context) bool {
	d, ok := b.Next()
	return ok && Sleep(ctx, d) == nil
}

// Sleep waits for d or until ctx ends, returning ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
