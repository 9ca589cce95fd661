package node

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// lease is the node's right to run its tasks: it holds for Config.Lease
// after the last time the coordinator answered. The coordinator restarts a
// job that failed with this node only after the lease has run out, so
// once it has, the node's tasks must stop and write nothing more: their
// work may be another node's now (fencing). ctx ends when the lease runs
// out; renew after that starts a new one.
type lease struct {
	d time.Duration

	mu     sync.Mutex
	last   time.Time
	ctx    context.Context
	cancel context.CancelFunc
}

func newLease(d time.Duration) lease {
	ctx, cancel := context.WithCancel(context.Background())
	return lease{d: d, last: time.Now(), ctx: ctx, cancel: cancel}
}

// renew records that the coordinator answered a request sent at sent. The
// lease runs from the sending, not the answer: the coordinator counts a
// silent node's lease from when it last heard it, which is no earlier, so
// a slow answer never lets the node run on past the time the coordinator
// takes its lease to have ended.
func (l *lease) renew(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent.After(l.last) {
		l.last = sent
	}
	if l.ctx.Err() != nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
}

// context ends when the lease runs out (checked by expire).
func (l *lease) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.last) > l.d {
		l.cancel()
	}
	return l.ctx
}

// expire ends the lease if it has run out and reports since when the
// coordinator has been silent, or zero if the lease holds.
func (l *lease) expire() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	silent := time.Since(l.last)
	if silent <= l.d {
		return 0
	}
	l.cancel()
	return silent
}

// checkLease stops every task once the lease has run out, and reports
// whether it stopped any.
func (a *Agent) checkLease() (fenced bool) {
	silent := a.lease.expire()
	if silent == 0 {
		return false
	}
	a.mu.Lock()
	n := len(a.tasks)
	a.mu.Unlock()
	if n > 0 {
		a.obs.fenced()
		a.stopTasks(fmt.Sprintf("lease of %s ran out: the coordinator has not answered for %s", a.cfg.Lease, silent.Round(time.Millisecond)))
	}
	return n > 0
}
