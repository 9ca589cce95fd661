package api

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func stampAt(t time.Time, i int) Stamp {
	s := Stamp{Time: t}
	copy(s.Nonce[:], fmt.Sprintf("nonce-%010d", i))
	return s
}

func TestNonceCacheRefusesARepeat(t *testing.T) {
	c := NewNonceCache(10)
	now := time.Unix(1_800_000_000, 0)
	s := stampAt(now, 1)
	if err := c.Seen(s, now); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if err := c.Seen(s, now.Add(time.Second)); !errors.Is(err, ErrReplayed) {
		t.Errorf("repeat: %v, want ErrReplayed", err)
	}
	if err := c.Seen(stampAt(now, 2), now); err != nil {
		t.Errorf("another nonce: %v", err)
	}
}

// TestNonceCacheHoldsANonceWhileVerifyAcceptsItsTime: a nonce is refused
// for as long as its time is within MaxClockSkew of now (even when the
// cache evicts others), and forgotten once it is not.
func TestNonceCacheHoldsANonceWhileVerifyAcceptsItsTime(t *testing.T) {
	c := NewNonceCache(10)
	t0 := time.Unix(1_800_000_000, 0)
	s := stampAt(t0, 1)
	if err := c.Seen(s, t0); err != nil {
		t.Fatal(err)
	}
	last := t0.Add(MaxClockSkew) // the last instant Verify accepts t0
	if err := c.Seen(stampAt(t0.Add(time.Minute), 2), last); err != nil {
		t.Fatal(err)
	}
	if err := c.Seen(s, last); !errors.Is(err, ErrReplayed) {
		t.Errorf("repeat at the window's end: %v, want ErrReplayed", err)
	}
	after := last.Add(time.Second)
	if err := c.Seen(stampAt(t0.Add(time.Minute), 3), after); err != nil {
		t.Fatal(err)
	}
	if n := c.Len(); n != 2 {
		t.Errorf("after the window: %d nonces held, want 2 (the expired one evicted)", n)
	}
	if err := c.Seen(s, after); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("the expired stamp again: %v, want ErrUnauthorized (too old)", err)
	}
}

// TestNonceCacheIsBounded: full of unexpired nonces it refuses new ones
// without growing, and takes them again once old ones expire.
func TestNonceCacheIsBounded(t *testing.T) {
	const max = 100
	c := NewNonceCache(max)
	t0 := time.Unix(1_800_000_000, 0)
	for i := range max {
		if err := c.Seen(stampAt(t0, i), t0); err != nil {
			t.Fatalf("nonce %d: %v", i, err)
		}
	}
	if err := c.Seen(stampAt(t0, max), t0); !errors.Is(err, ErrNonceCacheFull) {
		t.Errorf("one more: %v, want ErrNonceCacheFull", err)
	}
	if n := c.Len(); n != max {
		t.Errorf("holds %d nonces, want %d", n, max)
	}
	later := t0.Add(MaxClockSkew + time.Second)
	if err := c.Seen(stampAt(later, max+1), later); err != nil {
		t.Errorf("after the others expired: %v", err)
	}
	if n := c.Len(); n != 1 {
		t.Errorf("holds %d nonces after expiry, want 1", n)
	}
}

// TestNonceCacheConcurrentUse: goroutines recording the same nonces at
// once get each accepted exactly once (run with -race).
func TestNonceCacheConcurrentUse(t *testing.T) {
	const workers, nonces = 8, 500
	c := NewNonceCache(0)
	now := time.Unix(1_800_000_000, 0)
	var accepted [nonces]int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range nonces {
				err := c.Seen(stampAt(now, i), now)
				if err != nil && !errors.Is(err, ErrReplayed) {
					t.Errorf("nonce %d: %v", i, err)
				}
				if err == nil {
					mu.Lock()
					accepted[i]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for i, n := range accepted {
		if n != 1 {
			t.Errorf("nonce %d accepted %d times, want once", i, n)
		}
	}
}

// TestRequestsSignedBeforeTheStartAreRefused: a cache that began at t0
// refuses a request signed in an earlier second or in t0's own — its
// predecessor may have served it, even in that second — and takes one
// signed in the next second or later.
func TestRequestsSignedBeforeTheStartAreRefused(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 500_000_000)
	c := NewNonceCache(10)
	c.RefuseSignedThrough(t0)
	if err := c.Seen(stampAt(t0.Add(-time.Second), 1), t0); !errors.Is(err, ErrSignedBeforeStart) {
		t.Errorf("signed a second before the start: %v, want ErrSignedBeforeStart", err)
	}
	if err := c.Seen(stampAt(t0.Truncate(time.Second), 2), t0); !errors.Is(err, ErrSignedBeforeStart) {
		t.Errorf("signed in the start's second: %v, want ErrSignedBeforeStart", err)
	}
	if err := c.Seen(stampAt(t0.Add(time.Second), 3), t0.Add(time.Second)); err != nil {
		t.Errorf("signed in the second after the start: %v", err)
	}
	if err := NewNonceCache(10).Seen(stampAt(t0, 4), t0); err != nil {
		t.Errorf("a cache told no start refused a request: %v", err)
	}
}
