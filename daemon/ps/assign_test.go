package ps

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/wire"
)

// assignParts returns an assignment of the test block: values and Adam's
// two state buffers, each its own random floats.
func assignParts(seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 9))
	return [][]float32{randFloats(rng, testLen), randFloats(rng, testLen), randFloats(rng, testLen)}
}

// blockParts reads every part of the test block at version after.
func blockParts(t *testing.T, pull func(part int, dst []float32) (int64, error)) ([][]float32, int64) {
	t.Helper()
	var out [][]float32
	var version int64
	for part := range 3 {
		v := make([]float32, testLen)
		got, err := pull(part, v)
		if err != nil {
			t.Fatal(err)
		}
		out, version = append(out, v), got
	}
	return out, version
}

func sameParts(a, b [][]float32) bool {
	for k := range a {
		if !bitsEqual(a[k], b[k]) {
			return false
		}
	}
	return len(a) == len(b)
}

// A block takes an assignment once its last part is in, jumping its
// version to the step; retried parts are duplicates, and an older step, a
// part the optimiser lacks, a short part, a stage of two replicas and ASP
// are refused.
func TestAssignBlockTakesEveryPartAtOnce(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	want, sent := assignParts(1), assignParts(1)
	for part := 2; part >= 1; part-- { // any order
		ack, err := s.AssignBlock(id(0, 5), testBlock, part, sent[part])
		if err != nil || ack.Applied || ack.Duplicate {
			t.Fatalf("part %d: %+v, %v; want pending", part, ack, err)
		}
		if v, _ := s.Version(testBlock); v != 0 {
			t.Fatalf("part %d of 3 moved the block to version %d", part, v)
		}
	}
	if ack, err := s.AssignBlock(id(0, 5), testBlock, 2, want[0]); err != nil || !ack.Duplicate {
		t.Fatalf("a part resent: %+v, %v; want a duplicate", ack, err)
	}
	ack, err := s.AssignBlock(id(0, 5), testBlock, BlockValue, sent[0])
	if err != nil || !ack.Applied || ack.Version != 5 {
		t.Fatalf("last part: %+v, %v; want applied at version 5", ack, err)
	}
	for _, v := range sent {
		clear(v) // the shard copied the parts
	}
	got, version := blockParts(t, func(part int, dst []float32) (int64, error) {
		return s.PullBlockStateInto(context.Background(), testBlock, 5, part, dst)
	})
	if version != 5 || !sameParts(got, want) {
		t.Fatalf("after the assignment: version %d, parts equal %v", version, sameParts(got, want))
	}
	if ack, err := s.AssignBlock(id(0, 5), testBlock, 1, want[1]); err != nil || !ack.Duplicate {
		t.Fatalf("a part of the applied step resent: %+v, %v; want a duplicate", ack, err)
	}
	for _, tc := range []struct {
		name string
		id   PushID
		part int
		v    []float32
		want error
	}{
		{"an older step", id(0, 4), 0, want[0], ErrStale},
		{"a part past the optimiser's", id(0, 6), 3, want[0], ErrArg},
		{"a short part", id(0, 6), 0, want[0][1:], ErrArg},
		{"step zero", id(0, 0), 0, want[0], ErrArg},
	} {
		if _, err := s.AssignBlock(tc.id, testBlock, tc.part, tc.v); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	two := newTestShard(t, BSP, 2, adam)
	if _, err := two.AssignBlock(id(0, 1), testBlock, 0, want[0]); !errors.Is(err, ErrNotMember) {
		t.Errorf("a stage of two replicas: %v, want ErrNotMember", err)
	}
	asp := newTestShard(t, ASP, 1, adam)
	if _, err := asp.AssignBlock(id(0, 1), testBlock, 0, want[0]); !errors.Is(err, ErrArg) {
		t.Errorf("ASP: %v, want ErrArg", err)
	}
	if got, _ := s.Version(testBlock); got != 5 {
		t.Fatalf("refused parts moved the block to version %d", got)
	}
}

// A checkpoint fence holds an assignment of a later step until it lifts,
// and a checkpoint waits for the assignment of its step.
func TestAssignBlockRespectsCheckpoints(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	assign := func(step int64, parts [][]float32) Ack {
		t.Helper()
		var ack Ack
		for part, v := range parts {
			var err error
			if ack, err = s.AssignBlock(id(0, step), testBlock, part, v); err != nil {
				t.Fatal(err)
			}
		}
		return ack
	}
	pushRows := func(from, to int64) {
		t.Helper()
		for step := from; step <= to; step++ {
			if _, err := s.PushRows(id(0, step), testTable, 1, []int64{1}, make([]float32, testDim)); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, second := assignParts(1), assignParts(2)
	pushRows(1, 3)
	assign(3, first)
	if err := s.hold(3); err != nil {
		t.Fatal(err)
	}
	if ack := assign(4, second); ack.Applied || ack.Version != 3 {
		t.Fatalf("an assignment past the fence: %+v, want held at version 3", ack)
	}
	if got := pullBlock(t, s, 3); !bitsEqual(got, first[0]) {
		t.Fatal("the held assignment changed the values")
	}
	if err := s.release(); err != nil {
		t.Fatal(err)
	}
	got, version := blockParts(t, func(part int, dst []float32) (int64, error) {
		return s.PullBlockStateInto(context.Background(), testBlock, 4, part, dst)
	})
	if version != 4 || !sameParts(got, second) {
		t.Fatalf("after the fence lifted: version %d, parts equal %v", version, sameParts(got, second))
	}

	done := make(chan error, 1)
	go func() { _, err := s.Checkpoint(context.Background(), t.TempDir(), 10); done <- err }()
	pushRows(4, 10)
	time.Sleep(50 * time.Millisecond) // the checkpoint waits for its step
	select {
	case err := <-done:
		t.Fatalf("the checkpoint at step 10 ended before the block reached it: %v", err)
	default:
	}
	assign(10, assignParts(3))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Over the wire: a client's assignment reaches the shard, and malformed
// assignments are refused by name.
func TestAssignBlockOverTheWire(t *testing.T) {
	checkLeaks(t)
	shard := newTestShard(t, BSP, 1, adam)
	addr := served(t, ServiceOptions{}, shard)
	c := newClient(t, addr, 1, 0)
	want := assignParts(4)
	for part, v := range want {
		if err := c.AssignBlock(context.Background(), testBlock, 7, part, v); err != nil {
			t.Fatal(err)
		}
	}
	got, version := blockParts(t, func(part int, dst []float32) (int64, error) {
		return c.PullBlockStateInto(context.Background(), testBlock, 7, part, dst)
	})
	if version != 7 || !sameParts(got, want) {
		t.Fatalf("assigned over the wire: version %d, parts equal %v", version, sameParts(got, want))
	}

	conn, err := dialer(addr)(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	meta := wire.Meta{Job: JobKey("j"), Key: ParamKey(testBlock), Step: 8, Batch: 1}
	huge := meta
	huge.Micro = 1 << 40
	cases := []struct {
		name, reason string
		m            wire.Message
	}{
		{"no values", "tensors", wire.Message{Type: MsgAssignBlock, Meta: meta}},
		{"short values", "floats for a block", wire.Message{Type: MsgAssignBlock, Meta: meta, Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, 3), 3)}}},
		{"part out of range", "out of range", wire.Message{Type: MsgAssignBlock, Meta: huge, Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, testLen), testLen)}}},
		{"a table", "not a block", wire.Message{Type: MsgAssignBlock, Meta: wire.Meta{Job: JobKey("j"), Key: ParamKey(testTable), Step: 8, Batch: 1},
			Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, testLen), testLen)}}},
	}
	for _, tc := range cases {
		reply := request(t, conn, &tc.m)
		if reply.Type != wire.MsgError || !strings.Contains(reply.Text, tc.reason) {
			t.Fatalf("%s: got %v %q, want an error saying %q", tc.name, reply.Type, reply.Text, tc.reason)
		}
		reply.Release()
	}
	if v, _ := shard.Version(testBlock); v != 7 {
		t.Fatalf("refused assignments moved the block to version %d", v)
	}
}
