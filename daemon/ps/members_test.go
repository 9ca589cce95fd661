package ps

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
)

// stepGrads are one replica's gradients of one step: rows of the test
// table and the test block.
type stepGrads struct {
	weight float64
	ids    []int64
	rows   []float32
	block  []float32
}

func randGrads(rng *rand.Rand, weight float64) stepGrads {
	ids := []int64{int64(rng.IntN(3)), 3 + int64(rng.IntN(4)), 9}
	return stepGrads{weight: weight, ids: ids, rows: randFloats(rng, len(ids)*testDim), block: randFloats(rng, testLen)}
}

func pushAll(t *testing.T, s *Shard, replica int, step int64, g stepGrads) {
	t.Helper()
	mustPushRows(t, s, id(replica, step), g.weight, g.ids, g.rows)
	mustPushBlock(t, s, id(replica, step), g.weight, g.block)
}

// A step's barrier waits for exactly its members, named by id, and the
// average does not depend on the order of their pushes: members {1, 3}
// pushing in the order 3, 1 give the bits that a fresh two-replica shard
// gets from replicas 0, 1 pushing the same gradients in order.
func TestMembersAreReplicaIDsAndOrderDoesNotMatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g1, g3 := randGrads(rng, 300), randGrads(rng, 212)

	s := newTestShard(t, BSP, 2, adam)
	if err := s.SetMembers(0, 1, []int{3, 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushBlock(id(0, 1), testBlock, 1, g1.block); !errors.Is(err, ErrNotMember) {
		t.Errorf("push of replica 0, not a member: %v, want ErrNotMember", err)
	}
	pushAll(t, s, 3, 1, g3)
	if v, _ := s.Version(testBlock); v != 0 {
		t.Fatalf("step 1 applied with 1 of its 2 members (version %d)", v)
	}
	pushAll(t, s, 1, 1, g1)

	ref := newTestShard(t, BSP, 2, adam)
	pushAll(t, ref, 0, 1, g1)
	pushAll(t, ref, 1, 1, g3)
	if got, want := pullBlock(t, s, 1), pullBlock(t, ref, 1); !bitsEqual(got, want) {
		t.Errorf("block of members {1, 3}: %v, want %v", got, want)
	}
	ids := []int64{0, 1, 2, 3, 4, 5, 6, 9}
	if got, want := pullRows(t, s, ids, 1), pullRows(t, ref, ids, 1); !bitsEqual(got, want) {
		t.Errorf("table of members {1, 3}: %v, want %v", got, want)
	}
	if m, _ := s.Members(0, 7); len(m) != 2 || m[0] != 1 || m[1] != 3 {
		t.Errorf("members of step 7: %v, want [1 3]", m)
	}
}

// The dead-replica scenario: three replicas train k steps; at step k+1
// replica 2 pushes the block but dies before pushing the table, and the
// survivors wait in the table's barrier (replica 1 has yet to push the
// block). SetMembers for the open step removes it: the table's step
// completes with the survivors' pushes, replica 2's block push is
// discarded so that the block's step completes with the survivors', and
// training goes on with two. The result equals that of a shard restored
// from the checkpoint at step k with two replicas, fed the survivors'
// gradients.
func TestSetMembersDropsADeadReplicaFromTheOpenStep(t *testing.T) {
	const k, last = 3, 6
	rng := rand.New(rand.NewPCG(5, 6))
	grads := map[[2]int64]stepGrads{}
	for step := int64(1); step <= last; step++ {
		for r := range 3 {
			grads[[2]int64{int64(r), step}] = randGrads(rng, float64(100+r*37))
		}
	}
	g := func(r int, step int64) stepGrads { return grads[[2]int64{int64(r), step}] }

	cfg := testConfig(t, BSP, 0, 1, 3, adam)
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for step := int64(1); step <= k; step++ {
		for r := range 3 {
			pushAll(t, s, r, step, g(r, step))
		}
	}
	dir, err := CheckpointAll(context.Background(), t.TempDir(), k, []*Shard{s})
	if err != nil {
		t.Fatal(err)
	}

	mustPushBlock(t, s, id(2, k+1), g(2, k+1).weight, g(2, k+1).block) // then replica 2 dies
	pushAll(t, s, 0, k+1, g(0, k+1))
	mustPushRows(t, s, id(1, k+1), g(1, k+1).weight, g(1, k+1).ids, g(1, k+1).rows)
	if v, _ := s.Version(testTable); v != k {
		t.Fatalf("table at version %d before the dead replica is dropped, want %d", v, k)
	}
	if err := s.SetMembers(0, k+1, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Version(testTable); v != k+1 {
		t.Fatalf("table at version %d after the drop, want %d: the survivors' pushes complete it", v, k+1)
	}
	if v, _ := s.Version(testBlock); v != k {
		t.Fatalf("block at version %d after the drop, want %d: replica 1 has not pushed it", v, k)
	}
	mustPushBlock(t, s, id(1, k+1), g(1, k+1).weight, g(1, k+1).block)
	if v, _ := s.Version(testBlock); v != k+1 {
		t.Fatalf("block at version %d, want %d", v, k+1)
	}
	if err := s.SetMembers(0, k+1, []int{0, 1}); err != nil { // a resent change
		t.Fatalf("resending the change: %v", err)
	}
	if _, err := s.PushBlock(id(2, k+2), testBlock, 1, g(2, k+2).block); !errors.Is(err, ErrNotMember) {
		t.Errorf("the dropped replica pushing step %d: %v, want ErrNotMember", k+2, err)
	}
	for step := int64(k + 2); step <= last; step++ {
		pushAll(t, s, 1, step, g(1, step))
		pushAll(t, s, 0, step, g(0, step))
	}

	rcfg := testConfig(t, BSP, 0, 1, 2, adam)
	ref, err := Restore(rcfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	for step := int64(k + 1); step <= last; step++ {
		pushAll(t, ref, 0, step, g(0, step))
		pushAll(t, ref, 1, step, g(1, step))
	}
	if got, want := pullBlock(t, s, last), pullBlock(t, ref, last); !bitsEqual(got, want) {
		t.Errorf("block after dropping replica 2: %v, want %v", got, want)
	}
	ids := []int64{0, 1, 2, 3, 4, 5, 6, 9}
	if got, want := pullRows(t, s, ids, last), pullRows(t, ref, ids, last); !bitsEqual(got, want) {
		t.Errorf("table after dropping replica 2: %v, want %v", got, want)
	}
}

// Applied steps keep the set they were applied with; the change reaches
// the open step and the later ones only. A change to no replicas, or for
// a stage with nothing here, is refused.
func TestSetMembersLeavesAppliedStepsAlone(t *testing.T) {
	s := newTestShard(t, BSP, 2, adam)
	zero := make([]float32, testLen)
	mustPushBlock(t, s, id(0, 1), 1, zero)
	mustPushBlock(t, s, id(1, 1), 1, zero)
	mustPushBlock(t, s, id(0, 2), 1, zero)
	if err := s.SetMembers(0, 1, []int{0}); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Version(testBlock); v != 2 {
		t.Errorf("block at version %d after a change from step 1, want 2 (the open step 2 completed)", v)
	}
	if ack := mustPushBlock(t, s, id(1, 1), 1, zero); !ack.Duplicate {
		t.Errorf("replica 1 retrying step 1, applied with it: %+v, want a duplicate", ack)
	}
	if _, err := s.PushBlock(id(1, 3), testBlock, 1, zero); !errors.Is(err, ErrNotMember) {
		t.Errorf("replica 1 pushing step 3: %v, want ErrNotMember", err)
	}
	for _, bad := range []struct {
		stage    int
		from     int64
		replicas []int
	}{{0, 3, nil}, {0, 3, []int{1, 1}}, {0, 3, []int{-1}}, {0, 0, []int{0}}, {5, 3, []int{0}}} {
		if err := s.SetMembers(bad.stage, bad.from, bad.replicas); !errors.Is(err, ErrArg) {
			t.Errorf("SetMembers(%d, %d, %v): %v, want ErrArg", bad.stage, bad.from, bad.replicas, err)
		}
	}
	if m, _ := s.Members(0, 3); len(m) != 1 || m[0] != 0 {
		t.Errorf("refused changes changed the members: %v", m)
	}
}

// Adding a replica from a step already applied is refused and changes
// nothing (the step counted without it); from the open step it is waited
// for like the others.
func TestSetMembersRefusesAddingAtAnAppliedStep(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	zero := make([]float32, testLen)
	mustPushBlock(t, s, id(0, 1), 1, zero)
	mustPushBlock(t, s, id(0, 2), 1, zero)
	if err := s.SetMembers(0, 2, []int{0, 1}); !errors.Is(err, ErrLate) {
		t.Errorf("adding replica 1 from step 2, applied: %v, want ErrLate", err)
	}
	if m, _ := s.Members(0, 3); len(m) != 1 {
		t.Errorf("a refused change changed the members: %v", m)
	}
	if err := s.SetMembers(0, 3, []int{0, 1}); err != nil {
		t.Fatalf("adding replica 1 from the open step 3: %v", err)
	}
	mustPushBlock(t, s, id(0, 3), 1, zero)
	if v, _ := s.Version(testBlock); v != 2 {
		t.Errorf("step 3 applied without the added replica: version %d, want 2", v)
	}
	mustPushBlock(t, s, id(1, 3), 1, zero)
	if v, _ := s.Version(testBlock); v != 3 {
		t.Errorf("version %d after both members pushed step 3, want 3", v)
	}
}

// A membership change travels to every shard over the wire, may be sent
// again, and a bad one comes back as the service's refusal.
func TestClientSetMembersReachesEveryShard(t *testing.T) {
	checkLeaks(t)
	shards := twoShards(t, 2)
	addr := served(t, ServiceOptions{}, shards...)
	c := newClient(t, addr, 2, 0)
	ctx := context.Background()
	for range 2 {
		if err := c.SetMembers(ctx, 4, []int{7, 2}); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range shards {
		if m, _ := s.Members(0, 4); len(m) != 2 || m[0] != 2 || m[1] != 7 {
			t.Errorf("shard %d: members of step 4: %v, want [2 7]", i, m)
		}
		if m, _ := s.Members(0, 3); len(m) != 2 || m[0] != 0 || m[1] != 1 {
			t.Errorf("shard %d: members of step 3: %v, want [0 1]", i, m)
		}
	}
	if err := c.SetMembers(ctx, 4, nil); !errors.Is(err, ErrRemote) {
		t.Errorf("an empty member set: %v, want ErrRemote", err)
	}
}
