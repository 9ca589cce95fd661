package ps

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// ReplayWindow is how many of each replica's latest steps a table or block
// remembers having accepted, to acknowledge retried pushes without applying
// them twice.
const ReplayWindow = 64

// PushID identifies one push of one table or block: a retry carries the
// same identity.
type PushID struct {
	Job     string
	Stage   int
	Replica int   // a member of the stage for Step (Shard.SetMembers)
	Step    int64 // 1-based
}

func (id PushID) String() string {
	return fmt.Sprintf("job %s stage %d replica %d step %d", id.Job, id.Stage, id.Replica, id.Step)
}

// Ack answers an accepted push.
type Ack struct {
	// Duplicate: the identity was already pending or applied; the push
	// changed nothing.
	Duplicate bool
	// Applied: the update holding this push has been applied (BSP: this
	// push completed its step and no checkpoint fence held it).
	Applied bool
	// Version is the table's or block's version after the call.
	Version int64
}

// stepped is what tables and blocks share: the lock, the version, BSP's
// open step, the replay windows, and a channel closed whenever the version
// advances.
type stepped struct {
	mu       sync.RWMutex
	version  int64
	open     *barrier
	windows  map[int]*replayWindow
	advanced chan struct{}
	kept     sync.Pool // *[]float32: copies of pushed gradients, recycled once applied
}

// barrier collects the pushes of one BSP step from the stage's members
// for that step: pushes[i] is members[i]'s, nil until it arrives. Members
// ascend, so the weighted sum runs in replica order whatever the arrival
// order.
type barrier struct {
	step    int64
	members []int
	pushes  []*contribution
	got     int
}

func newBarrier(step int64, members []int) *barrier {
	return &barrier{step: step, members: members, pushes: make([]*contribution, len(members))}
}

func (b *barrier) full() bool { return b.got == len(b.pushes) }

// index returns the position of replica among the members, or -1.
func (b *barrier) index(replica int) int {
	if i, ok := slices.BinarySearch(b.members, replica); ok {
		return i
	}
	return -1
}

// withMembers returns the barrier of the same step for another member set:
// the pushes of replicas still members are kept, the others dropped.
func (b *barrier) withMembers(members []int) *barrier {
	nb := newBarrier(b.step, members)
	for i, r := range members {
		if j := b.index(r); j >= 0 && b.pushes[j] != nil {
			nb.pushes[i] = b.pushes[j]
			nb.got++
		}
	}
	return nb
}

// contribution is one accepted push: its weight and gradient (sparse pushes
// also give the table slots of their rows).
type contribution struct {
	weight float64
	slots  []int
	grad   []float32
	kept   *[]float32 // grad's buffer when the shard copied it (keep), else nil
	// parts: an assignment's values and optimiser state (AssignBlock),
	// the shard's own copies, instead of a gradient.
	parts [][]float32
}

// pooled returns a slice of n elements from pool (which holds *[]T), one
// recycled when a free one has the capacity, else a new one with spare
// more: the shard's per-step buffers (kept pushes, pull replies, a pull's
// slots) vary in length from step to step, or not at all (spare 0).
func pooled[T any](pool *sync.Pool, n, spare int) *[]T {
	p, ok := pool.Get().(*[]T)
	if !ok || cap(*p) < n {
		buf := make([]T, n, n+spare)
		p = &buf
	}
	*p = (*p)[:n]
	return p
}

// keep copies c's gradient into a buffer of the shard's, for a push that
// outlives its call (borrowGrad). Every replica's push but the last of a
// step is kept, every step: the buffers are recycled (release) rather than
// allocated anew, 1.2 MB a step and replica for ctrdnn's dense blocks.
func (st *stepped) keep(c *contribution) {
	if c.parts != nil {
		return // already the shard's
	}
	p := pooled[float32](&st.kept, len(c.grad), len(c.grad)/4) // a table's pushes vary in rows
	copy(*p, c.grad)
	c.grad, c.kept = *p, p
}

// release gives back the buffer keep gave c, once its push is applied.
func (st *stepped) release(c *contribution) {
	if c.kept != nil {
		st.kept.Put(c.kept)
		c.grad, c.kept = nil, nil
	}
}

func newStepped() stepped {
	return stepped{windows: make(map[int]*replayWindow), advanced: make(chan struct{})}
}

// admit decides, under the write lock, what to do with a push: report a
// duplicate, refuse it, or let it in (opening the BSP step with the stage's
// members for it if it is the step's first push). members returns the
// stage's replicas of a step.
func (st *stepped) admit(mode Mode, id PushID, members func(step int64) []int) (dup bool, err error) {
	if st.pending(id) || st.window(id.Replica).has(id.Step) {
		return true, nil
	}
	if mode == ASP {
		if st.window(id.Replica).tooOld(id.Step) {
			return false, fmt.Errorf("%v is older than the last %d steps of that replica: %w", id, ReplayWindow, ErrStale)
		}
		return false, checkMember(id, members(id.Step))
	}
	switch {
	case id.Step <= st.version:
		return false, fmt.Errorf("%v: step %d is already applied: %w", id, st.version, ErrStale)
	case id.Step > st.version+1:
		return false, fmt.Errorf("%v: step %d is the next to apply: %w", id, st.version+1, ErrAhead)
	}
	if st.open == nil {
		if err := checkMember(id, members(id.Step)); err != nil {
			return false, err
		}
		st.open = newBarrier(id.Step, members(id.Step))
	}
	return false, checkMember(id, st.open.members)
}

func checkMember(id PushID, members []int) error {
	if _, ok := slices.BinarySearch(members, id.Replica); !ok {
		return fmt.Errorf("%v: the stage's members for the step are %v: %w", id, members, ErrNotMember)
	}
	return nil
}

func (st *stepped) pending(id PushID) bool {
	if st.open == nil || st.open.step != id.Step {
		return false
	}
	i := st.open.index(id.Replica)
	return i >= 0 && st.open.pushes[i] != nil
}

// add puts an admitted push into the open BSP step.
func (st *stepped) add(replica int, c *contribution) {
	st.open.pushes[st.open.index(replica)] = c
	st.open.got++
}

func (st *stepped) window(replica int) *replayWindow {
	w, ok := st.windows[replica]
	if !ok {
		w = &replayWindow{}
		st.windows[replica] = w
	}
	return w
}

// advance records an applied update: the version moves to v and waiting
// pulls wake.
func (st *stepped) advance(v int64) {
	st.version = v
	close(st.advanced)
	st.advanced = make(chan struct{})
}

// finishStep records the open BSP step as applied.
func (st *stepped) finishStep() {
	b := st.open
	for _, r := range b.members {
		st.window(r).mark(b.step)
	}
	for _, c := range b.pushes {
		st.release(c)
	}
	st.open = nil
	st.advance(b.step)
}

// reached reports whether the version is at least after.
func (st *stepped) reached(after int64) bool {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.version >= after
}

// waitVersion waits until the version is at least after, or ctx ends, or
// closed is closed, or (stall > 0) the version has not advanced for stall.
// Its error says which replicas the open BSP step still waits for: whom a
// stuck step is stuck on.
func (st *stepped) waitVersion(ctx context.Context, closed <-chan struct{}, stall time.Duration, after int64) error {
	err := st.waitUntil(ctx, closed, stall, func() bool { return st.version >= after })
	if err != nil {
		st.mu.RLock()
		v := st.version
		st.mu.RUnlock()
		return fmt.Errorf("waiting for version %d (at %d%s): %w", after, v, st.awaited(), err)
	}
	return nil
}

// waitPushed waits until each of replicas has had its pushes of every step
// in (first, step] accepted (ASP), or as waitVersion gives up. Its error
// says how far each replica behind has pushed.
func (st *stepped) waitPushed(ctx context.Context, closed <-chan struct{}, stall time.Duration, replicas []int, first, step int64) error {
	err := st.waitUntil(ctx, closed, stall, func() bool { return st.pushedThrough(replicas, first, step) })
	if err != nil {
		return fmt.Errorf("waiting for every replica's pushes through step %d (%s): %w", step, st.behind(replicas, first, step), err)
	}
	return nil
}

// waitUntil waits until done, called under the read lock, reports true;
// it is checked again each time the version advances. It gives up when
// ctx ends, when closed is closed, or, with stall > 0, when the version has
// not advanced for stall (ErrStalled).
func (st *stepped) waitUntil(ctx context.Context, closed <-chan struct{}, stall time.Duration, done func() bool) error {
	var timer *time.Timer
	var stalled <-chan time.Time // nil, never ready, without a stall limit
	if stall > 0 {
		timer = time.NewTimer(stall)
		defer timer.Stop()
		stalled = timer.C
	}
	for {
		st.mu.RLock()
		ok, ch := done(), st.advanced
		st.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
			if timer != nil {
				timer.Reset(stall)
			}
		case <-stalled:
			return fmt.Errorf("no update for %s: %w", stall, ErrStalled)
		case <-ctx.Done():
			return ctx.Err()
		case <-closed:
			return ErrShardClosed
		}
	}
}

// pushedThrough reports whether each of replicas has pushed through step
// (through). Under the read lock.
func (st *stepped) pushedThrough(replicas []int, first, step int64) bool {
	for _, r := range replicas {
		if st.through(r, first) < step {
			return false
		}
	}
	return true
}

// through is the last step up to which replica's pushes of every step
// after first have been accepted (ASP, where pushes of one replica may
// arrive out of order after a reconnection). Steps below the replay window
// count as accepted: one that was not is refused as stale when it comes,
// failing its replica. Under the read lock.
func (st *stepped) through(replica int, first int64) int64 {
	w := st.windows[replica]
	if w == nil || w.top <= first {
		return first
	}
	k := max(first+1, w.top-ReplayWindow+1)
	for k <= w.top && w.has(k) {
		k++
	}
	return k - 1
}

// behind describes the replicas that have not pushed through step.
func (st *stepped) behind(replicas []int, first, step int64) string {
	st.mu.RLock()
	defer st.mu.RUnlock()
	var out []string
	for _, r := range replicas {
		if at := st.through(r, first); at < step {
			out = append(out, fmt.Sprintf("replica %d has pushed through step %d", r, at))
		}
	}
	return strings.Join(out, ", ")
}

// awaited describes the replicas whose pushes the open BSP step lacks.
func (st *stepped) awaited() string {
	st.mu.RLock()
	defer st.mu.RUnlock()
	b := st.open
	if b == nil {
		return ""
	}
	var missing []int
	for r, c := range b.pushes {
		if c == nil {
			missing = append(missing, r)
		}
	}
	return fmt.Sprintf("; step %d waits for the pushes of replicas %v of %d", b.step, missing, len(b.pushes))
}

// replayWindow remembers which of a replica's latest ReplayWindow steps were
// accepted: bit i of seen stands for step top-i (the anti-replay window of
// IPsec, RFC 4303 section 3.4.3). Steps are 1-based, so top 0 means none.
type replayWindow struct {
	top  int64
	seen uint64
}

func (w *replayWindow) has(step int64) bool {
	if step > w.top || step <= w.top-ReplayWindow {
		return false
	}
	return w.seen>>(w.top-step)&1 == 1
}

// tooOld reports whether step fell out of the window: it may have been
// applied, and there is no record left to tell.
func (w *replayWindow) tooOld(step int64) bool {
	return w.top > 0 && step <= w.top-ReplayWindow
}

func (w *replayWindow) mark(step int64) {
	switch {
	case step > w.top:
		if shift := step - w.top; shift >= ReplayWindow {
			w.seen = 0
		} else {
			w.seen <<= shift
		}
		w.seen |= 1
		w.top = step
	case step > w.top-ReplayWindow:
		w.seen |= 1 << (w.top - step)
	}
}
