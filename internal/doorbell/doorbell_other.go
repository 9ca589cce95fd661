//go:build !linux

package doorbell

import (
	"sync"
	"time"
)

var chMu sync.Mutex

func (b *Bell) channel() chan struct{} {
	chMu.Lock()
	defer chMu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{}, 1)
	}
	return b.ch
}

// sleep blocks on a channel off Linux, for up to d (0: no limit).
func (b *Bell) sleep(d time.Duration) {
	var after <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		after = t.C
	}
	select {
	case <-b.channel():
	case <-after:
	}
}

func (b *Bell) wake() {
	select {
	case b.channel() <- struct{}{}:
	default:
	}
}
