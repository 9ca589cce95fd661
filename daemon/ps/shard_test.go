package ps

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/initrow"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/native"
)

func TestPullCreatesRowsWithInitialValues(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	ids := []int64{7, 3, 7, 100, 3, 0, 12, 55, 9}
	rows, v, err := s.PullRows(context.Background(), testTable, ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v != 0 {
		t.Errorf("version %d before any push, want 0", v)
	}
	want := make([]float32, testDim)
	for i, id := range ids {
		initrow.Fill(want, 11, testTable, id, 0.1)
		if !bitsEqual(rows[i*testDim:(i+1)*testDim], want) {
			t.Errorf("row of id %d = %v, want initrow's %v", id, rows[i*testDim:(i+1)*testDim], want)
		}
	}
	if got := s.Rows(); got != 7 {
		t.Errorf("%d rows after pulling 7 distinct ids", got)
	}
	if again := pullRows(t, s, ids, 0); !bitsEqual(again, rows) {
		t.Errorf("second pull gave %v, first %v", again, rows)
	}
	if got := s.Rows(); got != 7 {
		t.Errorf("%d rows after pulling the same ids again, want 7", got)
	}
}

func TestShardOfSpreadsIDs(t *testing.T) {
	const shards, n = 4, 40000
	for _, stride := range []int64{1, shards, 1 << 20} {
		count := make([]int, shards)
		for i := range int64(n) {
			s := ShardOf(i*stride, shards)
			if s < 0 || s >= shards {
				t.Fatalf("ShardOf(%d, %d) = %d", i*stride, shards, s)
			}
			count[s]++
		}
		for s, c := range count {
			if c < n/shards*95/100 || c > n/shards*105/100 {
				t.Errorf("stride %d: shard %d holds %d of %d ids: %v", stride, s, c, n, count)
			}
		}
	}
}

func TestPartitionRestoresOrder(t *testing.T) {
	ids := []int64{5, -3, 99, 5, 1 << 40, 0, 17, 23}
	byShard, at := Partition(ids, 3)
	back := make([]int64, len(ids))
	seen := 0
	for s := range byShard {
		for j, id := range byShard[s] {
			if ShardOf(id, 3) != s {
				t.Errorf("id %d listed under shard %d, ShardOf says %d", id, s, ShardOf(id, 3))
			}
			back[at[s][j]] = id
			seen++
		}
	}
	if seen != len(ids) || !slices.Equal(back, ids) {
		t.Errorf("partition put back %v, want %v", back, ids)
	}
}

func TestPullRefusesAnotherShardsIDs(t *testing.T) {
	s, err := NewShard(testConfig(t, BSP, 1, 2, 1, adam))
	if err != nil {
		t.Fatal(err)
	}
	foreign := idsOn(0, 2, 1)
	_, _, err = s.PullRows(context.Background(), testTable, append(idsOn(1, 2, 2), foreign...), 0)
	if !errors.Is(err, ErrWrongShard) {
		t.Fatalf("pull of id %d on shard 1: %v, want ErrWrongShard", foreign[0], err)
	}
	if s.Rows() != 0 {
		t.Errorf("a refused pull created %d rows", s.Rows())
	}
}

// TestBSPDenseWeightedAverage pushes a block from three replicas with
// batch sizes 2, 5 and 9, out of order, and checks that exactly one update
// is applied, equal (within 1e-6) to Adam on the hand-computed average
// sum_k b_k/sum(b) g_k; a second step checks the state and step carried.
func TestBSPDenseWeightedAverage(t *testing.T) {
	s := newTestShard(t, BSP, 3, adam)
	rng := rand.New(rand.NewPCG(3, 4))
	init := pullBlock(t, s, 0)
	state := [][]float32{make([]float32, testLen), make([]float32, testLen)}
	want := init
	for step, batch := range [][]float64{{2, 5, 9}, {4, 1, 1}} {
		step := int64(step + 1)
		grads := [][]float32{randFloats(rng, testLen), randFloats(rng, testLen), randFloats(rng, testLen)}
		for j, r := range []int{2, 0, 1} {
			ack := mustPushBlock(t, s, id(r, step), batch[r], grads[r])
			if last := j == 2; ack.Applied != last || (ack.Version == step) != last {
				t.Fatalf("step %d push %d of 3: %+v", step, j+1, ack)
			}
			if j < 2 && !bitsEqual(pullBlock(t, s, 0), want) {
				t.Fatalf("step %d: block changed after %d of 3 pushes", step, j+1)
			}
		}
		want = update(t, adam.At(step), want, weightedAverage(batch, grads), state...)
		assertClose(t, "block", pullBlock(t, s, step), want, 1e-6)
		want = pullBlock(t, s, step) // carry on from the shard's values
	}
}

// weightedAverage is sum_k b_k/sum(b) g_k in float64.
func weightedAverage(batch []float64, grads [][]float32) []float32 {
	sum := 0.0
	for _, b := range batch {
		sum += b
	}
	out := make([]float32, len(grads[0]))
	for i := range out {
		acc := 0.0
		for k, g := range grads {
			acc += batch[k] / sum * float64(g[i])
		}
		out[i] = float32(acc)
	}
	return out
}

// TestBSPSparseMerge merges three replicas' rows by id — disjoint ids,
// an overlapping id, a row created by the push itself, a row nobody
// pushes — and checks each row against a dense update of that row with the
// hand-merged gradient (absent rows count zero). SGD with momentum checks
// that a row's state carries to the next step and untouched rows keep theirs.
func TestBSPSparseMerge(t *testing.T) {
	s := newTestShard(t, BSP, 3, sgdMom)
	rng := rand.New(rand.NewPCG(5, 6))
	pulled := []int64{1, 2, 3, 4, 5}
	rows := map[int64][]float32{}
	vel := map[int64][]float32{}
	for i, r := range pullRows(t, s, pulled, 0) {
		id := pulled[i/testDim]
		rows[id] = append(rows[id], r)
	}
	rows[6] = make([]float32, testDim)
	initrow.Fill(rows[6], 11, testTable, 6, 0.1)
	for id := range rows {
		vel[id] = make([]float32, testDim)
	}

	steps := []struct {
		batch []float64
		ids   [][]int64
	}{
		{[]float64{1, 3, 4}, [][]int64{{1, 2, 3}, {4, 3}, {6}}},
		{[]float64{2, 2, 2}, [][]int64{{1}, {}, {}}},
	}
	for si, st := range steps {
		step := int64(si + 1)
		grads := make([][]float32, 3)
		for r := range 3 {
			grads[r] = randFloats(rng, len(st.ids[r])*testDim)
			mustPushRows(t, s, id(r, step), st.batch[r], st.ids[r], grads[r])
		}
		for rid, want := range rows {
			g, touched := mergedRow(rid, st.batch, st.ids, grads)
			if touched {
				rows[rid] = update(t, sgdMom.At(step), want, g, vel[rid])
			}
		}
		for _, rid := range []int64{1, 2, 3, 4, 5, 6} {
			got := pullRows(t, s, []int64{rid}, step)
			if _, touched := mergedRow(rid, st.batch, st.ids, grads); !touched && step == 1 {
				if !bitsEqual(got, rows[rid]) {
					t.Errorf("step %d: row %d pushed by nobody changed to %v from %v", step, rid, got, rows[rid])
				}
				continue
			}
			assertClose(t, "row", got, rows[rid], 1e-6)
			rows[rid] = got
		}
	}
}

// mergedRow is row id's weighted gradient over the replicas, in float64,
// and whether any replica pushed it.
func mergedRow(rid int64, batch []float64, ids [][]int64, grads [][]float32) ([]float32, bool) {
	sum := 0.0
	for _, b := range batch {
		sum += b
	}
	acc := make([]float64, testDim)
	touched := false
	for r := range ids {
		if j := slices.Index(ids[r], rid); j >= 0 {
			touched = true
			for i := range acc {
				acc[i] += batch[r] / sum * float64(grads[r][j*testDim+i])
			}
		}
	}
	out := make([]float32, testDim)
	for i, v := range acc {
		out[i] = float32(v)
	}
	return out, touched
}

// TestOneReplicaIsBitIdenticalToSingleProcess: with one replica the weight
// is exactly 1, and a step must equal UpdateRows on a whole table in one
// process, bit for bit (the deterministic mode's promise).
func TestOneReplicaIsBitIdenticalToSingleProcess(t *testing.T) {
	const vocab = 23
	s := newTestShard(t, BSP, 1, adam)
	b := testBackend(t)
	table := make([]float32, vocab*testDim)
	for r := range int64(vocab) {
		initrow.Fill(table[r*testDim:(r+1)*testDim], 11, testTable, r, 0.1)
	}
	state := []native.Buffer{b.Alloc(len(table)), b.Alloc(len(table))}
	rng := rand.New(rand.NewPCG(7, 8))
	for step := int64(1); step <= 3; step++ {
		var ids []int64 // distinct, some crossing slabs
		for _, r := range rng.Perm(vocab)[:3+step] {
			ids = append(ids, int64(r))
		}
		g := randFloats(rng, len(ids)*testDim)
		mustPushRows(t, s, id(0, step), 37, ids, g)
		if err := b.UpdateRows(adam.At(step), native.HostBuffer(table), vocab, testDim, ids, native.HostBuffer(g), state...); err != nil {
			t.Fatal(err)
		}
	}
	all := make([]int64, vocab)
	for i := range all {
		all[i] = int64(i)
	}
	if got := pullRows(t, s, all, 3); !bitsEqual(got, table) {
		t.Errorf("one-replica BSP differs from single-process UpdateRows:\n got %v\nwant %v", got, table)
	}
}

func TestRetriedPushIsAppliedOnce(t *testing.T) {
	for _, mode := range []Mode{BSP, ASP} {
		t.Run(mode.String(), func(t *testing.T) {
			s := newTestShard(t, mode, 2, sgdMom)
			ids := []int64{1, 2}
			g := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
			mustPushRows(t, s, id(0, 1), 1, ids, g)
			retry := mustPushRows(t, s, id(0, 1), 1, ids, g)
			if !retry.Duplicate || retry.Applied {
				t.Fatalf("retry of a pushed identity: %+v, want a duplicate", retry)
			}
			mustPushRows(t, s, id(1, 1), 1, ids, g)
			after := pullRows(t, s, ids, 1)
			v, _ := s.Version(testTable)
			// Retries after the update, even with other data, change nothing.
			for r := range 2 {
				ack := mustPushRows(t, s, id(r, 1), 5, []int64{3}, g[:testDim])
				if !ack.Duplicate || ack.Version != v {
					t.Errorf("retry of replica %d after the update: %+v, want a duplicate at version %d", r, ack, v)
				}
			}
			if got := pullRows(t, s, ids, 0); !bitsEqual(got, after) {
				t.Errorf("rows changed on retries: %v, were %v", got, after)
			}
			if got, _ := s.Version(testTable); got != v {
				t.Errorf("version %d after retries, was %d", got, v)
			}
			if s.Rows() != 2 {
				t.Errorf("a duplicate push created rows: %d rows", s.Rows())
			}
		})
	}
}

func TestStalePushesAreRejected(t *testing.T) {
	t.Run("bsp out of window", func(t *testing.T) {
		s := newTestShard(t, BSP, 1, adam)
		for step := int64(1); step <= 70; step++ {
			mustPushRows(t, s, id(0, step), 1, nil, nil)
		}
		if _, err := s.PushRows(id(0, 1), testTable, 1, nil, nil); !errors.Is(err, ErrStale) {
			t.Errorf("push for step 1 at version 70: %v, want ErrStale", err)
		}
		if ack := mustPushRows(t, s, id(0, 70), 1, nil, nil); !ack.Duplicate {
			t.Errorf("retry of step 70: %+v, want a duplicate", ack)
		}
		if _, err := s.PushRows(id(0, 72), testTable, 1, nil, nil); !errors.Is(err, ErrAhead) {
			t.Errorf("push for step 72 at version 70: %v, want ErrAhead", err)
		}
	})
	t.Run("bsp replica that missed the step", func(t *testing.T) {
		s := newTestShard(t, BSP, 1, adam)
		mustPushBlock(t, s, id(0, 1), 1, make([]float32, testLen))
		if err := s.SetMembers(0, 2, []int{0, 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PushBlock(id(1, 1), testBlock, 1, make([]float32, testLen)); !errors.Is(err, ErrStale) {
			t.Errorf("replica 1 pushing applied step 1: %v, want ErrStale", err)
		}
		mustPushBlock(t, s, id(1, 2), 1, make([]float32, testLen))
		if v, _ := s.Version(testBlock); v != 1 {
			t.Errorf("step 2 applied with 1 of the 2 replicas now registered (version %d)", v)
		}
	})
	t.Run("asp", func(t *testing.T) {
		s := newTestShard(t, ASP, 2, adam)
		for step := int64(1); step <= 70; step++ {
			mustPushRows(t, s, id(0, step), 1, nil, nil)
		}
		if _, err := s.PushRows(id(0, 3), testTable, 1, nil, nil); !errors.Is(err, ErrStale) {
			t.Errorf("asp push of step 3 after step 70: %v, want ErrStale", err)
		}
		if ack := mustPushRows(t, s, id(0, 69), 1, nil, nil); !ack.Duplicate {
			t.Errorf("asp retry of step 69: %+v, want a duplicate", ack)
		}
		if ack := mustPushRows(t, s, id(1, 3), 1, nil, nil); !ack.Applied || ack.Version != 71 {
			t.Errorf("replica 1's step 3: %+v, want applied at version 71", ack)
		}
	})
}

// TestASPAppliesEachPush checks every push is its own update, its gradient
// times its weight, at consecutive optimiser steps.
func TestASPAppliesEachPush(t *testing.T) {
	s := newTestShard(t, ASP, 2, sgdMom)
	rng := rand.New(rand.NewPCG(9, 10))
	want := pullBlock(t, s, 0)
	vel := make([]float32, testLen)
	pushes := []struct {
		replica int
		step    int64
		weight  float64
	}{{0, 1, 0.5}, {1, 1, 2}, {1, 2, 1}}
	for n, p := range pushes {
		g := randFloats(rng, testLen)
		ack := mustPushBlock(t, s, id(p.replica, p.step), p.weight, g)
		if !ack.Applied || ack.Version != int64(n+1) {
			t.Fatalf("push %d: %+v, want applied at version %d", n, ack, n+1)
		}
		scaled := make([]float32, testLen)
		for i := range g {
			scaled[i] = float32(p.weight) * g[i]
		}
		want = update(t, sgdMom.At(int64(n+1)), want, scaled, vel)
		if got := pullBlock(t, s, int64(n+1)); !bitsEqual(got, want) {
			t.Fatalf("after push %d: %v, want %v", n, got, want)
		}
	}
}

func TestPushValidation(t *testing.T) {
	s := newTestShard(t, BSP, 2, adam)
	g := make([]float32, 2*testDim)
	cases := []struct {
		name string
		push func() error
		want error
	}{
		{"other job", func() error {
			_, err := s.PushRows(PushID{Job: "k", Replica: 0, Step: 1}, testTable, 1, []int64{1, 2}, g)
			return err
		}, ErrWrongJob},
		{"other stage", func() error {
			_, err := s.PushRows(PushID{Job: "j", Stage: 1, Step: 1}, testTable, 1, []int64{1, 2}, g)
			return err
		}, ErrArg},
		{"replica not a member", func() error { _, err := s.PushRows(id(2, 1), testTable, 1, []int64{1, 2}, g); return err }, ErrNotMember},
		{"step 0", func() error { _, err := s.PushRows(id(0, 0), testTable, 1, []int64{1, 2}, g); return err }, ErrArg},
		{"zero weight", func() error { _, err := s.PushRows(id(0, 1), testTable, 0, []int64{1, 2}, g); return err }, ErrArg},
		{"repeated id", func() error { _, err := s.PushRows(id(0, 1), testTable, 1, []int64{1, 1}, g); return err }, ErrArg},
		{"short gradient", func() error { _, err := s.PushRows(id(0, 1), testTable, 1, []int64{1, 2}, g[1:]); return err }, ErrArg},
		{"block length", func() error { _, err := s.PushBlock(id(0, 1), testBlock, 1, g); return err }, ErrArg},
		{"unknown table", func() error { _, err := s.PushRows(id(0, 1), "nope", 1, nil, nil); return err }, ErrUnknown},
		{"unknown block", func() error { _, _, err := s.PullBlock(context.Background(), "nope", 0); return err }, ErrUnknown},
	}
	for _, c := range cases {
		if err := c.push(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if s.Rows() != 0 {
		t.Errorf("refused pushes created %d rows", s.Rows())
	}
	if ack := mustPushRows(t, s, id(0, 1), 1, []int64{1, 2}, g); ack.Duplicate {
		t.Errorf("the first valid push after refused ones is a duplicate: %+v", ack)
	}
}

func TestRowCap(t *testing.T) {
	cfg := testConfig(t, BSP, 0, 1, 1, adam)
	cfg.MaxRows = 10
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pullRows(t, s, []int64{0, 1, 2, 3, 4, 5, 6, 7}, 0)
	_, _, err = s.PullRows(context.Background(), testTable, []int64{1, 8, 9, 10}, 0)
	if !errors.Is(err, ErrRowCap) || !strings.Contains(err.Error(), testTable) {
		t.Fatalf("pull of 3 new rows beside 8 under a cap of 10: %v, want ErrRowCap naming the table", err)
	}
	if s.Rows() != 8 {
		t.Errorf("%d rows after a refused pull, want 8", s.Rows())
	}
	_, err = s.PushRows(id(0, 1), testTable, 1, []int64{20, 21, 22}, make([]float32, 3*testDim))
	if !errors.Is(err, ErrRowCap) {
		t.Errorf("push creating 3 rows beside 8 under a cap of 10: %v, want ErrRowCap", err)
	}
	pullRows(t, s, []int64{8, 9, 3}, 0) // exactly at the cap
	if s.Rows() != 10 {
		t.Errorf("%d rows, want 10", s.Rows())
	}
}

func TestPullWaitsForTheStep(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	type result struct {
		rows []float32
		v    int64
		err  error
	}
	done := make(chan result)
	go func() {
		rows, v, err := s.PullRows(context.Background(), testTable, []int64{4}, 1)
		done <- result{rows, v, err}
	}()
	before := pullRows(t, s, []int64{4}, 0)
	select {
	case r := <-done:
		t.Fatalf("pull for version 1 returned at version 0: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
	mustPushRows(t, s, id(0, 1), 1, []int64{4}, []float32{1, 1, 1, 1, 1})
	r := <-done
	if r.err != nil || r.v != 1 || bitsEqual(r.rows, before) {
		t.Errorf("pull after step 1: version %d, rows %v (were %v), err %v", r.v, r.rows, before, r.err)
	}
}

// TestHeldPullOfNewRowsAnswersTheUpdate: a pull held for a step creates
// its missing rows before it waits (their slots never change), and once
// the step is applied it answers with the updated rows, the same as a
// pull made afterwards.
func TestHeldPullOfNewRowsAnswersTheUpdate(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	ids := []int64{9, 2, 9}
	done := make(chan []float32)
	go func() {
		rows, _, err := s.PullRows(context.Background(), testTable, ids, 1)
		if err != nil {
			t.Error(err)
		}
		done <- rows
	}()
	for deadline := time.Now().Add(5 * time.Second); s.Rows() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the held pull holds %d rows, want its 2 created before it waits", s.Rows())
		}
	}
	mustPushRows(t, s, id(0, 1), 1, []int64{2, 9}, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	held := <-done
	if after := pullRows(t, s, ids, 1); !bitsEqual(held, after) {
		t.Fatalf("held pull %v, a pull after the step %v", held, after)
	}
}

func TestWaitsEnd(t *testing.T) {
	cfg := testConfig(t, BSP, 0, 1, 1, adam)
	cfg.WaitTimeout = 10 * time.Millisecond
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PullBlock(context.Background(), testBlock, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("pull with no deadline past WaitTimeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.PullRows(ctx, testTable, []int64{1}, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("pull with a cancelled context: %v", err)
	}
}

// TestOptimMatchesNN pins OptimConfig.At to daemon/nn's NativeOptim, which
// single-process training uses, for every schedule.
func TestOptimMatchesNN(t *testing.T) {
	for _, cfg := range []config.Optimizer{
		{Kind: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4},
		{Kind: "adagrad", LR: 0.03, Eps: 1e-6, Schedule: "warmup", Warmup: 7},
		{Kind: "adam", LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Schedule: "cosine", Warmup: 5},
		{Kind: "adam", LR: 0.3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-7, Schedule: "cosine"},
	} {
		const total = 40
		kinds := map[string]native.OptKind{"sgd": native.SGD, "adagrad": native.Adagrad, "adam": native.Adam}
		o := OptimConfig{
			Hyper: native.Optim{Kind: kinds[cfg.Kind], Momentum: float32(cfg.Momentum), Beta1: float32(cfg.Beta1),
				Beta2: float32(cfg.Beta2), Eps: float32(cfg.Eps), WeightDecay: float32(cfg.WeightDecay)},
			LR: cfg.LR, Warmup: int64(cfg.Warmup), Cosine: cfg.Schedule == "cosine", TotalSteps: total,
		}
		for step := int64(1); step <= total+3; step++ {
			if got, want := o.At(step), nn.NativeOptim(cfg, step, total); got != want {
				t.Fatalf("%+v step %d: %+v, nn %+v", cfg, step, got, want)
			}
		}
	}
}

func TestConfigValidation(t *testing.T) {
	base := func() Config { return testConfig(t, BSP, 0, 1, 1, adam) }
	cases := map[string]func(*Config){
		"no job":          func(c *Config) { c.Job = "" },
		"shard index":     func(c *Config) { c.Shard = 1 },
		"no backend":      func(c *Config) { c.Backend = nil },
		"zero dim":        func(c *Config) { c.Tables[0].Dim = 0 },
		"unknown stage":   func(c *Config) { c.Tables[0].Stage = 3 },
		"adam beta":       func(c *Config) { c.Blocks[0].Optim.Hyper.Beta1 = 1 },
		"zero replicas":   func(c *Config) { c.Replicas[0] = 0 },
		"tensor clash":    func(c *Config) { c.Blocks[0].Name = testTable + ".ids" },
		"same name twice": func(c *Config) { c.Blocks[0].Name = testTable },
	}
	for name, mutate := range cases {
		cfg := base()
		mutate(&cfg)
		if _, err := NewShard(cfg); !errors.Is(err, ErrArg) {
			t.Errorf("%s: %v, want ErrArg", name, err)
		}
	}
}

func TestFirstDuplicateSortedAndUnsorted(t *testing.T) {
	for _, tc := range []struct {
		ids  []int64
		want int
	}{
		{nil, -1},
		{[]int64{3}, -1},
		{[]int64{1, 2, 5, 9}, -1},
		{[]int64{1, 2, 2, 9}, 2},
		{[]int64{9, 2, 5, 1}, -1},
		{[]int64{9, 2, 5, 2, 9}, 3},
		{[]int64{4, 4}, 1},
	} {
		if got := firstDuplicate(tc.ids); got != tc.want {
			t.Errorf("firstDuplicate(%v) = %d, want %d", tc.ids, got, tc.want)
		}
	}
}

// TestPushesSpreadOverSlabsApplyLikeOneTable pushes ids whose rows were
// created in an order unrelated to the ids (so a step's rows sit in several
// slabs, out of order) from two replicas with overlapping ids, and checks
// every row against the same optimiser run on a plain per-id state.
func TestPushesSpreadOverSlabsApplyLikeOneTable(t *testing.T) {
	s := newTestShard(t, BSP, 2, adam)
	creation := []int64{17, 3, 11, 29, 5, 23, 2, 13, 7, 19}
	initial := pullRows(t, s, creation, 0)
	rng := rand.New(rand.NewPCG(5, 6))
	pushA, pushB := []int64{2, 5, 13, 29}, []int64{7, 11, 13, 17, 23, 29}
	gradA, gradB := randFloats(rng, len(pushA)*testDim), randFloats(rng, len(pushB)*testDim)
	if _, err := s.PushRows(id(0, 1), testTable, 1, pushA, gradA); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushRows(id(1, 1), testTable, 3, pushB, gradB); err != nil {
		t.Fatal(err)
	}
	got := pullRows(t, s, creation, 1)

	be := testBackend(t)
	for i, rowID := range creation {
		g, touched := stepRowGradient(rowID, rowPush{pushA, gradA, 0.25}, rowPush{pushB, gradB, 0.75})
		want := slices.Clone(initial[i*testDim : (i+1)*testDim])
		if touched {
			state := []native.Buffer{be.Alloc(testDim), be.Alloc(testDim)}
			if err := be.Update(adam.At(1), native.HostBuffer(want), native.HostBuffer(g), state...); err != nil {
				t.Fatal(err)
			}
		}
		for x := range want {
			if d := math.Abs(float64(got[i*testDim+x] - want[x])); d > 1e-6 {
				t.Fatalf("id %d [%d]: %v, want %v", rowID, x, got[i*testDim+x], want[x])
			}
		}
	}
}

// TestCloseEndsWaits: a pull waiting on a BSP step that one replica never
// pushes ends with ErrShardClosed when the shard is closed, and its error
// names the replica the step waits for; later waits end at once.
func TestCloseEndsWaits(t *testing.T) {
	s := newTestShard(t, BSP, 2, adam)
	mustPushBlock(t, s, id(0, 1), 1, make([]float32, testLen))
	done := make(chan error, 1)
	go func() {
		_, _, err := s.PullBlock(context.Background(), testBlock, 1)
		done <- err
	}()
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrShardClosed) || !strings.Contains(err.Error(), "step 1 waits for the pushes of replicas [1] of 2") {
			t.Fatalf("pull after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pull still waits after Close")
	}
	if _, _, err := s.PullRows(context.Background(), testTable, []int64{1}, 1); !errors.Is(err, ErrShardClosed) {
		t.Fatalf("pull on a closed shard: %v", err)
	}
}

// TestLayOutListsSlotsAscending: a step's update walks each slab forwards
// (the prefetchers follow), whatever order the pushes listed their rows
// in, and each push's rows still find their own positions.
func TestLayOutListsSlotsAscending(t *testing.T) {
	tb := newTable(TableSpec{Name: testTable, Dim: 1}, 4)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, k := range rng.Perm(70_000) { // slots up to three bytes wide
		tb.add(int64(k))
	}
	pushA := &contribution{slots: []int{69_999, 5, 300, 4, 65_536, 256}}
	pushB := &contribution{slots: []int{300, 1, 70_000 - 2, 5}}
	slots, rows := tb.layOut([]*contribution{pushA, pushB})
	want := []int{1, 4, 5, 256, 300, 65_536, 69_998, 69_999}
	if !slices.Equal(slots, want) {
		t.Fatalf("slots %v, want %v", slots, want)
	}
	for p, c := range []*contribution{pushA, pushB} {
		for j, k := range c.slots {
			if slots[rows[p][j]] != k {
				t.Fatalf("push %d row %d: position %d holds slot %d, want %d", p, j, rows[p][j], slots[rows[p][j]], k)
			}
		}
	}
}

// TestRecycledBuffersKeepStepsExact: over several BSP steps of two
// replicas whose pushes change in rows and values, the shard's recycled
// buffers (the kept first pushes, the scattered rows and their sums) give
// exactly what the weighted sum and the optimiser give from scratch: no
// row of an earlier step leaks into a later one.
func TestRecycledBuffersKeepStepsExact(t *testing.T) {
	s := newTestShard(t, BSP, 2, adam)
	be := testBackend(t)
	universe := []int64{2, 3, 5, 7, 11, 13, 17, 19, 23}
	want := map[int64][]float32{}
	state := map[int64][]native.Buffer{}
	initial := pullRows(t, s, universe, 0)
	for i, k := range universe {
		want[k] = slices.Clone(initial[i*testDim : (i+1)*testDim])
		state[k] = []native.Buffer{be.Alloc(testDim), be.Alloc(testDim)}
	}
	wantBlock := pullBlock(t, s, 0)
	blockState := []native.Buffer{be.Alloc(testLen), be.Alloc(testLen)}
	rng := rand.New(rand.NewPCG(9, 10))
	// Each replica's rows move between steps and the steps' row sets
	// shrink, so that a buffer reused without clearing would still hold
	// rows of an earlier step where this one has none.
	sets := [][2][]int64{
		{universe[0:6], universe[6:9]}, {universe[3:9], universe[0:3]},
		{universe[0:5], universe[4:9]}, {universe[2:4], universe[5:7]},
	}
	for i, set := range sets {
		step, a, b := int64(i+1), set[0], set[1]
		ga, gb := randFloats(rng, len(a)*testDim), randFloats(rng, len(b)*testDim)
		da, db := randFloats(rng, testLen), randFloats(rng, testLen)
		mustPushRows(t, s, id(0, step), 1, a, ga)
		mustPushBlock(t, s, id(0, step), 1, da)
		mustPushRows(t, s, id(1, step), 3, b, gb)
		mustPushBlock(t, s, id(1, step), 3, db)
		for _, k := range universe {
			g, touched := stepRowGradient(k, rowPush{a, ga, 0.25}, rowPush{b, gb, 0.75})
			if touched {
				if err := be.Update(adam.At(step), native.HostBuffer(want[k]), native.HostBuffer(g), state[k]...); err != nil {
					t.Fatal(err)
				}
			}
		}
		g := make([]float32, testLen)
		if err := be.WeightedSum(native.HostBuffer(g), []float32{0.25, 0.75}, []native.Buffer{native.HostBuffer(da), native.HostBuffer(db)}); err != nil {
			t.Fatal(err)
		}
		if err := be.Update(adam.At(step), native.HostBuffer(wantBlock), native.HostBuffer(g), blockState...); err != nil {
			t.Fatal(err)
		}
		got := pullRows(t, s, universe, step)
		for i, k := range universe {
			if !bitsEqual(got[i*testDim:(i+1)*testDim], want[k]) {
				t.Fatalf("step %d, id %d: %v, want %v", step, k, got[i*testDim:(i+1)*testDim], want[k])
			}
		}
		if !bitsEqual(pullBlock(t, s, step), wantBlock) {
			t.Fatalf("step %d: the block differs from its weighted update", step)
		}
	}
}

// TestKeptPushesAreRecycled: a two-replica BSP step keeps a copy of the
// first replica's gradient until the second's arrives; over many steps of a
// 1 MiB block those copies, and the sum of the two, come from recycled
// buffers, not from a fresh allocation a step.
func TestKeptPushesAreRecycled(t *testing.T) {
	const n = 1 << 18 // floats: 1 MiB
	s := bigBlockShard(t, 2, n)
	g := make([]float32, n)
	step := int64(0)
	push := func() {
		step++
		mustPushBlock(t, s, id(0, step), 1, g)
		mustPushBlock(t, s, id(1, step), 1, g)
	}
	push()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const steps = 20
	for range steps {
		push()
	}
	runtime.ReadMemStats(&after)
	// Under a megabyte a step: a copy and a sum a step would be 2 MiB (the
	// race detector's sync.Pool drops a quarter of what it is given).
	if per := (after.TotalAlloc - before.TotalAlloc) / steps; per > n*4 {
		t.Fatalf("a two-replica step of a %d-byte block allocates %d bytes", n*4, per)
	}
}

// TestSplitRunsBalancesWholeSlabs: a step's slab runs are cut into at most
// n groups in order, none empty, covering every run once, the cuts where
// the rows reach each n-th of the total.
func TestSplitRunsBalancesWholeSlabs(t *testing.T) {
	runs := []slabRun{{0, 0, 10}, {1, 10, 30}, {2, 30, 35}, {4, 35, 60}, {7, 60, 100}}
	for n := 1; n <= 7; n++ {
		parts := splitRuns(runs, n)
		if len(parts) > n {
			t.Fatalf("n %d: %d groups", n, len(parts))
		}
		var joined []slabRun
		for _, p := range parts {
			if len(p) == 0 {
				t.Fatalf("n %d: an empty group in %v", n, parts)
			}
			joined = append(joined, p...)
		}
		if !slices.Equal(joined, runs) {
			t.Fatalf("n %d: groups %v do not cover the runs in order", n, parts)
		}
	}
	if got := splitRuns(runs, 2); len(got) != 2 || got[0][len(got[0])-1].hi != 60 {
		t.Fatalf("halves %v: want the first to end at row 60, where the rows pass 50", got)
	}
}

// TestSlabsUpdatedSideBySideMatchOneThread: a step of thousands of rows
// over many slabs, updated by a 2-thread backend (slab groups side by
// side), leaves every row bit-identical to a 1-thread backend's update.
func TestSlabsUpdatedSideBySideMatchOneThread(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ids := make([]int64, 3000)
	for i := range ids {
		ids[i] = int64(i * 7)
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	grads := [][]float32{randFloats(rng, len(ids)*testDim), randFloats(rng, len(ids)*testDim)}
	var rows [2][]float32
	for i, threads := range []int{1, 2} {
		cfg := testConfig(t, BSP, 0, 1, 1, adam)
		cfg.SlabRows = 256
		be, err := native.NewCPU(native.CPUOptions{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Backend = be
		_, rows[i] = trainShard(t, cfg, ids, grads)
	}
	if !bitsEqual(rows[0], rows[1]) {
		t.Fatal("rows updated by 2 threads differ from 1 thread's")
	}
}

// A pull into a caller's rows allocates nothing once its rows exist: the
// slots it looks the ids up into are recycled.
func TestPullRowsIntoAllocatesNothing(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	ids := idsOn(0, 1, 500)
	dst := make([]float32, len(ids)*testDim)
	ctx := context.Background()
	if _, err := s.PullRowsInto(ctx, testTable, ids, 0, dst, testDim, nil); err != nil { // creates the rows
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := s.PullRowsInto(ctx, testTable, ids, 0, dst, testDim, nil); err != nil {
			t.Fatal(err)
		}
	})
	// The race detector's sync.Pool drops a quarter of what it is given,
	// which averages below one.
	if allocs >= 1 {
		t.Fatalf("%v allocations a pull of %d existing rows", allocs, len(ids))
	}
}
