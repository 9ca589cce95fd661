package api

import (
	"container/heap"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultNonceCacheSize is the coordinator's NonceCache capacity: 1<<20
// nonces, about 64 MiB when full (a map entry and a heap entry of ~24 bytes
// each, plus the map's overhead). A nonce is held until its request's time
// leaves the MaxClockSkew window, at most 2*MaxClockSkew = 10 minutes after
// it arrived and about 5 minutes for clients with a synchronised clock, so
// this takes a sustained ~3,400 signed requests per second: some thousand
// nodes heartbeating every second and every client polling.
const DefaultNonceCacheSize = 1 << 20

// ErrReplayed is returned by NonceCache.Seen for a nonce it already holds.
var ErrReplayed = errors.New("replayed request")

// ErrSignedBeforeStart is returned by NonceCache.Seen for a request signed
// before the cache's start or in its second (NonceCache.RefuseSignedThrough):
// a coordinator just restarted cannot tell a replay of a request its
// predecessor served — up to the second it died, which may be the one it
// started in — from one nobody sent, so it refuses both; a client's retry,
// signed anew in a later second, passes.
var ErrSignedBeforeStart = errors.New("signed before the coordinator started")

// ErrNonceCacheFull is returned by NonceCache.Seen when it holds its
// capacity of unexpired nonces: the request is refused (not served
// unchecked), and may be retried once older nonces expire.
var ErrNonceCacheFull = errors.New("replay cache full")

// NonceCache remembers the nonces of verified requests for as long as
// Verify would accept their time, so that each is served once. Its memory
// is bounded: nonces whose time left the window are evicted as new ones
// arrive, and once it holds max unexpired nonces it refuses new ones
// rather than grow. Only record requests whose MAC verified, or anyone
// could fill it. Safe for concurrent use.
type NonceCache struct {
	mu     sync.Mutex
	max    int
	seen   map[[NonceSize]byte]struct{}
	expiry expiryHeap // the same nonces, soonest to expire first
	// through is the last second whose requests it refuses (0: none).
	through int64
}

// RefuseSignedThrough makes the cache refuse requests signed in the second
// of start, the time it began recording, or before: the nonces of requests
// served until then (by a coordinator this one replaced, which may have
// served its last in that very second) are not in it. Times are signed to
// the second, so the start's own second cannot be split.
func (c *NonceCache) RefuseSignedThrough(start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.through = start.Unix()
}

// NewNonceCache returns a cache of at most max nonces (DefaultNonceCacheSize
// if max <= 0).
func NewNonceCache(max int) *NonceCache {
	if max <= 0 {
		max = DefaultNonceCacheSize
	}
	return &NonceCache{max: max, seen: make(map[[NonceSize]byte]struct{})}
}

// Seen records s's nonce at time now. It returns ErrReplayed if the nonce
// is already recorded, ErrSignedBeforeStart if s's time is not after the
// cache's start second, ErrNonceCacheFull if max unexpired nonces are, and
// ErrUnauthorized if s's time is already out of the MaxClockSkew window
// (Verify refuses those first).
func (c *NonceCache) Seen(s Stamp, now time.Time) error {
	if now.Sub(s.Time) > MaxClockSkew {
		return fmt.Errorf("%w: the request's time %s is more than %s old", ErrUnauthorized, s.Time.UTC().Format(time.RFC3339), MaxClockSkew)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.through > 0 && s.Time.Unix() <= c.through {
		return fmt.Errorf("%w: the request's time %s is not after the second the coordinator started, %s; sign it anew", ErrSignedBeforeStart,
			s.Time.UTC().Format(time.RFC3339), time.Unix(c.through, 0).UTC().Format(time.RFC3339))
	}
	if _, ok := c.seen[s.Nonce]; ok {
		return fmt.Errorf("%w: nonce %x was already used at %s", ErrReplayed, s.Nonce, s.Time.UTC().Format(time.RFC3339))
	}
	c.evictExpired(now)
	if len(c.seen) >= c.max {
		return fmt.Errorf("%w: %d requests within the last %s; retry later", ErrNonceCacheFull, len(c.seen), MaxClockSkew)
	}
	c.seen[s.Nonce] = struct{}{}
	heap.Push(&c.expiry, nonceExpiry{nonce: s.Nonce, expires: s.Time.Add(MaxClockSkew).Unix()})
	return nil
}

// Len is how many nonces the cache holds, expired ones not yet evicted
// included.
func (c *NonceCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// evictExpired forgets the nonces whose time Verify refuses at now: past
// time+MaxClockSkew, a replay fails the time check instead.
func (c *NonceCache) evictExpired(now time.Time) {
	for len(c.expiry) > 0 && now.Unix() > c.expiry[0].expires {
		e := heap.Pop(&c.expiry).(nonceExpiry)
		delete(c.seen, e.nonce)
	}
}

type nonceExpiry struct {
	nonce   [NonceSize]byte
	expires int64 // unix seconds: the last second Verify accepts the request's time
}

type expiryHeap []nonceExpiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(nonceExpiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
