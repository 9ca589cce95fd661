package ps

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// A BSP push that waits for the step's other pushes keeps its own copy of
// the gradient (borrowGrad): the pusher overwriting its buffer afterwards
// changes nothing.
func TestWaitingPushKeepsItsOwnGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ids := []int64{2, 9, 4}
	g0, g1 := randFloats(rng, len(ids)*testDim), randFloats(rng, len(ids)*testDim)
	b0, b1 := randFloats(rng, testLen), randFloats(rng, testLen)

	reused, ref := newTestShard(t, BSP, 2, adam), newTestShard(t, BSP, 2, adam)
	rows, block := slices.Clone(g0), slices.Clone(b0)
	mustPushRows(t, reused, id(0, 1), 3, ids, rows)
	mustPushBlock(t, reused, id(0, 1), 3, block)
	for i := range rows {
		rows[i] = 1e6 // the pusher reuses its buffers
	}
	for i := range block {
		block[i] = 1e6
	}
	mustPushRows(t, reused, id(1, 1), 5, ids, g1)
	mustPushBlock(t, reused, id(1, 1), 5, b1)

	mustPushRows(t, ref, id(0, 1), 3, ids, g0)
	mustPushBlock(t, ref, id(0, 1), 3, b0)
	mustPushRows(t, ref, id(1, 1), 5, ids, g1)
	mustPushBlock(t, ref, id(1, 1), 5, b1)

	if !bitsEqual(pullRows(t, reused, ids, 1), pullRows(t, ref, ids, 1)) {
		t.Error("rows: the waiting push saw its pusher's later writes")
	}
	if !bitsEqual(pullBlock(t, reused, 1), pullBlock(t, ref, 1)) {
		t.Error("block: the waiting push saw its pusher's later writes")
	}
}

// An ASP push is weighted in the shard's own copy, never in the pusher's
// buffer.
func TestASPPushLeavesThePushersGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := newTestShard(t, ASP, 1, adam)
	g, rows := randFloats(rng, testLen), randFloats(rng, 2*testDim)
	gWas, rowsWas := slices.Clone(g), slices.Clone(rows)
	mustPushBlock(t, s, id(0, 1), 3, g)
	mustPushRows(t, s, id(0, 1), 3, []int64{1, 6}, rows)
	if !bitsEqual(g, gWas) || !bitsEqual(rows, rowsWas) {
		t.Error("an ASP push changed the pusher's gradient")
	}
}

// A BSP push that completes its step is applied from the pusher's buffer,
// not from a copy: pushing a block allocates far less than the block.
func TestCompletingPushUsesThePushersGradient(t *testing.T) {
	const n, pushes = 1 << 18, 8
	cfg := testConfig(t, BSP, 0, 1, 1, adam)
	cfg.Blocks[0].Init = make([]float32, n)
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := randFloats(rand.New(rand.NewPCG(9, 10)), n)
	mustPushBlock(t, s, id(0, 1), 1, g) // the first push's lazy set-up is not counted
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for step := int64(2); step < 2+pushes; step++ {
		mustPushBlock(t, s, id(0, step), 1, g)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / pushes; per >= n*4/2 {
		t.Errorf("a push of a %d-float block allocated %d bytes: the gradient was copied", n, per)
	}
}

// A push whose ids are not ascending and repeat one is refused (the check
// on its slots, firstRepeatedSlot), leaves the step open, and the scratch
// it marked is clear again: the same step's valid push then applies.
func TestUnsortedRepeatedIDsAreRefused(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	g := randFloats(rand.New(rand.NewPCG(11, 12)), 4*testDim)
	if _, err := s.PushRows(id(0, 1), testTable, 1, []int64{9, 2, 5, 2}, g); err == nil || !strings.Contains(err.Error(), "ids[3] = 2 is listed twice") {
		t.Fatalf("push with ids 9, 2, 5, 2: %v, want ids[3] listed twice", err)
	}
	ack := mustPushRows(t, s, id(0, 1), 1, []int64{9, 2, 5, 7}, g)
	if !ack.Applied {
		t.Fatalf("the valid push after the refused one: %+v, want applied", ack)
	}
	for i, v := range s.tables[testTable].at {
		if v != 0 {
			t.Fatalf("scratch at[%d] = %d after the pushes, want all zero", i, v)
		}
	}
}

func TestFirstRepeatedSlot(t *testing.T) {
	tb := &table{ids: make([]int64, 10)}
	for _, tc := range []struct {
		slots []int
		want  int
	}{
		{nil, -1},
		{[]int{3}, -1},
		{[]int{9, 2, 5, 1}, -1},
		{[]int{9, 2, 5, 2, 9}, 3},
		{[]int{4, 4}, 1},
	} {
		if got := tb.firstRepeatedSlot(tc.slots); got != tc.want {
			t.Errorf("firstRepeatedSlot(%v) = %d, want %d", tc.slots, got, tc.want)
		}
		if slices.ContainsFunc(tb.at, func(v int32) bool { return v != 0 }) {
			t.Fatalf("after %v the scratch is %v, want all zero", tc.slots, tb.at)
		}
	}
}
