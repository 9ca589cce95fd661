package wiretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heterps/heterps/daemon/wire"
)

// ErrCut is what Send and Recv return for a peer whose link is cut.
var ErrCut = errors.New("wiretest: link cut")

// Faulty wraps a wire.Transport and injects per-peer faults into Send and
// Recv. Faults on one peer leave the others alone; Heal clears them.
type Faulty struct {
	wire.Transport

	mu      sync.Mutex
	faults  map[string]*fault
	waiters map[string]map[*context.CancelCauseFunc]struct{} // Recv calls to wake on Cut
}

type fault struct {
	drop      int           // sends still to drop silently
	delay     time.Duration // added before every send
	blackhole bool          // sends vanish, receives discard what arrives
	cut       bool          // sends and receives fail with ErrCut
}

var _ wire.Transport = (*Faulty)(nil)

// NewFaulty wraps t.
func NewFaulty(t wire.Transport) *Faulty {
	return &Faulty{
		Transport: t,
		faults:    make(map[string]*fault),
		waiters:   make(map[string]map[*context.CancelCauseFunc]struct{}),
	}
}

// DropNext silently drops the next n messages sent to peer (Send returns nil).
func (f *Faulty) DropNext(peer string, n int) { f.update(peer, func(x *fault) { x.drop = n }) }

// Delay holds every message sent to peer for d first (Send returns later).
func (f *Faulty) Delay(peer string, d time.Duration) { f.update(peer, func(x *fault) { x.delay = d }) }

// Blackhole makes messages to peer vanish and those from it be discarded.
func (f *Faulty) Blackhole(peer string) { f.update(peer, func(x *fault) { x.blackhole = true }) }

// Cut makes Send and Recv for peer fail with ErrCut, waking Recv calls that
// are waiting.
func (f *Faulty) Cut(peer string) {
	f.update(peer, func(x *fault) { x.cut = true })
	f.mu.Lock()
	defer f.mu.Unlock()
	for cancel := range f.waiters[peer] {
		(*cancel)(ErrCut)
	}
}

// Heal clears every fault on peer.
func (f *Faulty) Heal(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.faults, peer)
}

func (f *Faulty) update(peer string, change func(*fault)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.faults[peer]
	if x == nil {
		x = &fault{}
		f.faults[peer] = x
	}
	change(x)
}

// current returns peer's faults, using up one drop if any are left.
func (f *Faulty) current(peer string) (x fault, dropped bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.faults[peer]
	if p == nil {
		return fault{}, false
	}
	if p.drop > 0 {
		p.drop--
		dropped = true
	}
	return *p, dropped
}

// Send applies peer to's faults, then sends through the wrapped transport.
func (f *Faulty) Send(ctx context.Context, to string, stream uint32, m *wire.Message) error {
	x, dropped := f.current(to)
	switch {
	case x.cut:
		return fmt.Errorf("send to %q: %w", to, ErrCut)
	case dropped || x.blackhole:
		return nil
	}
	if x.delay > 0 {
		t := time.NewTimer(x.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f.Transport.Send(ctx, to, stream, m)
}

// Recv receives through the wrapped transport, discarding messages from a
// blackholed peer and failing for a cut one.
func (f *Faulty) Recv(ctx context.Context, from string, stream uint32) (*wire.MessageView, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !f.watch(from, &cancel) {
		return nil, fmt.Errorf("recv from %q: %w", from, ErrCut)
	}
	defer f.unwatch(from, &cancel)
	for {
		m, err := f.Transport.Recv(ctx, from, stream)
		if errors.Is(context.Cause(ctx), ErrCut) {
			return nil, fmt.Errorf("recv from %q: %w", from, ErrCut)
		}
		if err != nil {
			return nil, err
		}
		if x, _ := f.peek(from); x.blackhole {
			continue
		}
		return m, nil
	}
}

func (f *Faulty) peek(peer string) (fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.faults[peer]; p != nil {
		return *p, true
	}
	return fault{}, false
}

// watch registers a Recv to be cancelled by Cut; false if already cut.
func (f *Faulty) watch(peer string, cancel *context.CancelCauseFunc) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.faults[peer]; p != nil && p.cut {
		return false
	}
	if f.waiters[peer] == nil {
		f.waiters[peer] = make(map[*context.CancelCauseFunc]struct{})
	}
	f.waiters[peer][cancel] = struct{}{}
	return true
}

func (f *Faulty) unwatch(peer string, cancel *context.CancelCauseFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.waiters[peer], cancel)
	if len(f.waiters[peer]) == 0 {
		delete(f.waiters, peer)
	}
}
