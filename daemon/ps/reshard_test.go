package ps

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// sharded is one job's shards with the block placed by BlockShard, driven
// by pushes routed as a client routes them.
type sharded struct {
	job    string
	cfgs   []Config
	shards []*Shard
}

func placedConfigs(t *testing.T, mode Mode, job string, n int) []Config {
	t.Helper()
	var cfgs []Config
	for i := range n {
		cfg := testConfig(t, mode, i, n, 2, adam)
		cfg.Job, cfg.Blocks = job, nil
		if BlockShard(testBlock, n) == i {
			cfg.Blocks = testConfig(t, mode, 0, n, 2, adam).Blocks
		}
		cfgs = append(cfgs, cfg)
	}
	return cfgs
}

func newSharded(t *testing.T, mode Mode, job string, n int) *sharded {
	t.Helper()
	j := &sharded{job: job, cfgs: placedConfigs(t, mode, job, n)}
	for _, cfg := range j.cfgs {
		s, err := NewShard(cfg)
		if err != nil {
			t.Fatal(err)
		}
		j.shards = append(j.shards, s)
	}
	return j
}

// step pushes one step from two replicas: random ids below 40 and a block
// gradient, drawn from (seed, step) so that two jobs get the same step.
func (j *sharded) step(t *testing.T, step int64, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(step)))
	n := len(j.shards)
	for r := range 2 {
		pid := PushID{Job: j.job, Replica: r, Step: step}
		ids := rng.Perm(40)[:5+rng.IntN(20)]
		all := make([]int64, len(ids))
		for k, id := range ids {
			all[k] = int64(id)
		}
		slices.Sort(all)
		grad := randFloats(rng, len(all)*testDim)
		byShard, at := Partition(all, n)
		for i, s := range j.shards {
			var g []float32
			for _, pos := range at[i] {
				g = append(g, grad[pos*testDim:(pos+1)*testDim]...)
			}
			mustPushRows(t, s, pid, float64(1+r), byShard[i], g)
		}
		mustPushBlock(t, j.shards[BlockShard(testBlock, n)], pid, float64(1+r), randFloats(rng, testLen))
	}
}

// state pulls the rows of ids 0..39 from their shards and the block.
func (j *sharded) state(t *testing.T, after int64) [][]float32 {
	t.Helper()
	n := len(j.shards)
	var out [][]float32
	for id := range int64(40) {
		out = append(out, pullRows(t, j.shards[ShardOf(id, n)], []int64{id}, after))
	}
	return append(out, pullBlock(t, j.shards[BlockShard(testBlock, n)], after))
}

// TestRestoreAsReshards: a 3-shard checkpoint restored as a job of 2 and
// of 1 shard holds the same rows, optimiser state and block, and the next
// step gives the same parameters as on the original 3 shards — in BSP and
// in ASP, whose tables take the largest of their old shards' versions
// (the step of Adam's bias correction).
func TestRestoreAsReshards(t *testing.T) {
	defer func(c int) { reshardChunk = c }(reshardChunk)
	reshardChunk = 5 // files hold about 13 rows each
	for _, mode := range []Mode{BSP, ASP} {
		t.Run(mode.String(), func(t *testing.T) { testReshard(t, mode) })
	}
}

func testReshard(t *testing.T, mode Mode) {
	orig := newSharded(t, mode, "j", 3)
	for step := int64(1); step <= 3; step++ {
		orig.step(t, step, 1)
	}
	dir, err := CheckpointAll(context.Background(), t.TempDir(), 3, orig.shards)
	if err != nil {
		t.Fatal(err)
	}
	held := 0 // before state pulls create the rows of ids never pushed
	for _, s := range orig.shards {
		held += s.Rows()
	}
	after := func(step int64) int64 { // what a pull waits for: none in ASP
		if mode == ASP {
			return 0
		}
		return step
	}
	for _, n := range []int{2, 1} {
		next := &sharded{job: "k", cfgs: placedConfigs(t, mode, "k", n)}
		rows := 0
		for _, cfg := range next.cfgs {
			strict := cfg
			strict.Job = "j"
			if _, err := Restore(strict, dir); err == nil || !strings.Contains(err.Error(), "3 shards") {
				t.Fatalf("strict Restore into %d shards: %v", n, err)
			}
			s, err := RestoreAs(cfg, dir)
			if err != nil {
				t.Fatalf("%d shards: %v", n, err)
			}
			next.shards = append(next.shards, s)
			rows += s.Rows()
		}
		if rows != held {
			t.Fatalf("%d shards hold %d rows, the checkpoint %d", n, rows, held)
		}
		assertSameState(t, "re-sharded", next.state(t, after(3)), orig.state(t, after(3)))
		orig2 := newSharded(t, mode, "j", 3) // the original, replayed, for the step after
		for step := int64(1); step <= 4; step++ {
			orig2.step(t, step, 1)
		}
		next.step(t, 4, 1)
		assertSameState(t, "after the next step", next.state(t, after(4)), orig2.state(t, after(4)))
	}
}
