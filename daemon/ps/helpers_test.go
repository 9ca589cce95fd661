package ps

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/heterps/heterps/native"
)

const (
	testTable = "emb.table"
	testBlock = "fc.weight"
	testDim   = 5
	testLen   = 37 // block length: not a multiple of any vector width
)

var (
	adam    = OptimConfig{Hyper: native.Optim{Kind: native.Adam, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, LR: 0.01}
	sgdMom  = OptimConfig{Hyper: native.Optim{Kind: native.SGD, Momentum: 0.9, WeightDecay: 1e-4}, LR: 0.05}
	adagrad = OptimConfig{Hyper: native.Optim{Kind: native.Adagrad, Eps: 1e-6}, LR: 0.1, Warmup: 3}
)

func testBackend(t testing.TB) native.Backend {
	t.Helper()
	b, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testConfig is shard i of n of job "j": one table and, on shard 0, one
// block, both of stage 0 with the given replica count. Slabs of 4 rows make
// every test cross slab boundaries.
func testConfig(t testing.TB, mode Mode, i, n, replicas int, o OptimConfig) Config {
	cfg := Config{
		Job: "j", Model: "ctrdnn", Shard: i, Shards: n, Mode: mode,
		Replicas: map[int]int{0: replicas},
		Tables:   []TableSpec{{Name: testTable, Dim: testDim, Optim: o, InitSeed: 11, InitLimit: 0.1}},
		SlabRows: 4, WaitTimeout: 10 * time.Second, Backend: testBackend(t),
	}
	if i == 0 {
		cfg.Blocks = []BlockSpec{{Name: testBlock, Init: randFloats(rand.New(rand.NewPCG(1, 2)), testLen), Optim: o}}
	}
	return cfg
}

func newTestShard(t testing.TB, mode Mode, replicas int, o OptimConfig) *Shard {
	t.Helper()
	s, err := NewShard(testConfig(t, mode, 0, 1, replicas, o))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randFloats(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

func id(replica int, step int64) PushID {
	return PushID{Job: "j", Stage: 0, Replica: replica, Step: step}
}

func pullRows(t testing.TB, s *Shard, ids []int64, after int64) []float32 {
	t.Helper()
	rows, _, err := s.PullRows(context.Background(), testTable, ids, after)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func pullBlock(t testing.TB, s *Shard, after int64) []float32 {
	t.Helper()
	v, _, err := s.PullBlock(context.Background(), testBlock, after)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustPushRows(t testing.TB, s *Shard, pid PushID, weight float64, ids []int64, g []float32) Ack {
	t.Helper()
	ack, err := s.PushRows(pid, testTable, weight, ids, g)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func mustPushBlock(t testing.TB, s *Shard, pid PushID, weight float64, g []float32) Ack {
	t.Helper()
	ack, err := s.PushBlock(pid, testBlock, weight, g)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// update runs one dense optimiser step on copies, with fresh state unless
// state is given, and returns the new values.
func update(t testing.TB, o native.Optim, w, g []float32, state ...[]float32) []float32 {
	t.Helper()
	b := testBackend(t)
	out := slices.Clone(w)
	if state == nil {
		for range o.StateBuffers() {
			state = append(state, make([]float32, len(w)))
		}
	}
	bufs := make([]native.Buffer, len(state))
	for i, s := range state {
		bufs[i] = native.HostBuffer(s)
	}
	if err := b.Update(o, native.HostBuffer(out), native.HostBuffer(slices.Clone(g)), bufs...); err != nil {
		t.Fatal(err)
	}
	return out
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func assertClose(t testing.TB, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > tol || math.IsNaN(d) {
			t.Fatalf("%s[%d] = %v, want %v (tolerance %g)", what, i, got[i], want[i], tol)
		}
	}
}

// idsOn returns n distinct ids that shard i of shards holds.
func idsOn(i, shards, n int) []int64 {
	var out []int64
	for id := int64(0); len(out) < n; id++ {
		if ShardOf(id, shards) == i {
			out = append(out, id)
		}
	}
	return out
}

// rowPush is one replica's sparse push, as a test's reference sees it.
type rowPush struct {
	ids  []int64
	grad []float32
	w    float32 // its weight in the step's sum
}

// stepRowGradient is the weighted sum of the pushes' gradients for row id
// (pushes that lack it count zero), and whether any push has it.
func stepRowGradient(id int64, pushes ...rowPush) (g []float32, touched bool) {
	g = make([]float32, testDim)
	for _, p := range pushes {
		if j := slices.Index(p.ids, id); j >= 0 {
			touched = true
			for x := range g {
				g[x] += p.w * p.grad[j*testDim+x]
			}
		}
	}
	return g, touched
}

// bigBlockShard is a BSP shard of job "j" for replicas replicas whose one
// block holds n zeros.
func bigBlockShard(t testing.TB, replicas, n int) *Shard {
	t.Helper()
	cfg := testConfig(t, BSP, 0, 1, replicas, adam)
	cfg.Blocks = []BlockSpec{{Name: testBlock, Init: make([]float32, n), Optim: adam}}
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// trainShard makes a shard of cfg, pushes grads[i] for ids as step i+1
// (one replica), and returns it with the rows pulled after the last step.
func trainShard(t testing.TB, cfg Config, ids []int64, grads [][]float32) (*Shard, []float32) {
	t.Helper()
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for step, g := range grads {
		mustPushRows(t, s, id(0, int64(step+1)), 1, ids, g)
	}
	return s, pullRows(t, s, ids, int64(len(grads)))
}
