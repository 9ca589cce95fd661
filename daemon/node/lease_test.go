package node

import (
	"testing"
	"time"
)

// TestALeaseRunsFromTheRequestNotItsAnswer: a renewal counts from when the
// request was sent, so an answer that took most of the lease leaves only
// the rest of it, and an older renewal never shortens a newer one.
func TestALeaseRunsFromTheRequestNotItsAnswer(t *testing.T) {
	l := newLease(time.Second)
	l.last = time.Now().Add(-5 * time.Second)        // renewed long ago
	l.renew(time.Now().Add(-900 * time.Millisecond)) // answered 0.9 s after it was sent
	if l.expire() != 0 {
		t.Fatal("the lease ran out 0.9 s into it")
	}
	time.Sleep(150 * time.Millisecond)
	if l.expire() == 0 {
		t.Error("the lease holds 1.05 s after the request that renewed it")
	}
	l.renew(time.Now())
	l.renew(time.Now().Add(-2 * time.Second)) // a late answer to an earlier request
	if l.expire() != 0 {
		t.Error("an answer to an older request shortened the lease")
	}
}
