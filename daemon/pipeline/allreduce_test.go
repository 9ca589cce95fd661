package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// ringTransports starts n transports, every pair peered, named ring-i.
func ringTransports(t testing.TB, n int) ([]wire.Transport, []string) {
	t.Helper()
	trs := make([]*wire.TCPTransport, n)
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("ring-%d", i)
		tr, err := wire.NewTCPTransport("127.0.0.1:0", wireConfig(names[i]))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trs[i] = tr
	}
	for hi := range n {
		for lo := range hi {
			peerPair(t, trs[hi], names[hi], trs[lo], names[lo])
		}
	}
	out := make([]wire.Transport, n)
	for i, tr := range trs {
		out[i] = tr
	}
	return out, names
}

// peerPair makes a and b peers, the larger id first (it waits to be
// dialled and would turn away a dial from a peer it does not know yet).
func peerPair(t testing.TB, a *wire.TCPTransport, an string, b *wire.TCPTransport, bn string) {
	t.Helper()
	if an < bn {
		a, an, b, bn = b, bn, a, an
	}
	if err := a.AddPeer(bn, b.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(an, a.Addr().String()); err != nil {
		t.Fatal(err)
	}
}

// reduceAll runs one ring reduction of grads (one per member, rows[k]
// rows each) and returns what every member holds afterwards.
func reduceAll(t *testing.T, trs []wire.Transport, names []string, step int64, grads [][]float32, rows []int) [][]float32 {
	t.Helper()
	return reduceEach(t, trs, names, step, grads, rows, nil)
}

// reduceEach is reduceAll where each member k reduces with update(k, its
// gradient), if update is set, and returns what that update holds in w.
func reduceEach(t *testing.T, trs []wire.Transport, names []string, step int64, grads [][]float32, rows []int,
	update func(k int, g []float32) *ownerUpdate) [][]float32 {
	t.Helper()
	n := len(grads)
	a := &Allreduce{Peers: names}
	out := make([][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() {
			ak := *a
			ak.Transport = trs[k]
			r, err := newRing(&ak, 1, 0, step, iotaInts(n), k)
			if err != nil {
				errs[k] = err
				return
			}
			out[k] = slices.Clone(grads[k])
			var u *ownerUpdate
			if update != nil {
				u = update(k, out[k])
			}
			errs[k] = r.reduce(context.Background(), 3, out[k], rows[k], u)
			if u != nil {
				out[k] = u.w
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The ring leaves every member with the same bytes, the rows-weighted mean
// of the members' gradients, for lengths below, at and above the member
// count and for chunks of several pieces; and the same inputs give the
// same bytes again (the order of the additions is fixed).
func TestRingAllreduceIsTheWeightedMeanOnEveryMember(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		members, length int
	}{{2, 1}, {3, 2}, {3, 7}, {4, 1000}, {4, 3}, {2, 2*ringPiece + 3}, {3, 5*ringPiece + 1}, {4, 2*ringPiece + 1}, {5, 11},
		{8, 5}, {8, 1000}, {4, 2 * ringPiece}, {8, 2*ringPiece + 1}} {
		t.Run(fmt.Sprintf("%d members, %d floats", tc.members, tc.length), func(t *testing.T) {
			trs, names := ringTransports(t, tc.members)
			rng := rand.New(rand.NewPCG(uint64(tc.members), uint64(tc.length)))
			grads := make([][]float32, tc.members)
			rows := make([]int, tc.members)
			total := 0
			for k := range grads {
				rows[k] = 1 + rng.IntN(9)
				total += rows[k]
				for range tc.length {
					grads[k] = append(grads[k], rng.Float32()*2-1)
				}
			}
			got := reduceAll(t, trs, names, 1, grads, rows)
			for k := 1; k < tc.members; k++ {
				if !slices.Equal(got[k], got[0]) {
					t.Fatalf("member %d holds other bytes than member 0", k)
				}
			}
			for i := range tc.length {
				want := 0.0
				for k := range grads {
					want += float64(rows[k]) * float64(grads[k][i]) / float64(total)
				}
				if d := math.Abs(float64(got[0][i]) - want); d > 1e-5 {
					t.Fatalf("element %d: %g, weighted mean %g", i, got[0][i], want)
				}
			}
			again := reduceAll(t, trs, names, 2, grads, rows)
			if !slices.Equal(again[0], got[0]) {
				t.Fatal("the same gradients reduced to other bytes the second time")
			}
			// Sharded: each owner steps w -= 2g on its chunk; every member
			// ends with the steps of the whole mean, and owns only its chunk.
			applied := make([][2]int, tc.members)
			stepped := reduceEach(t, trs, names, 3, grads, rows, func(k int, g []float32) *ownerUpdate {
				w := make([]float32, len(g))
				applied[k] = [2]int{-1, -1}
				return &ownerUpdate{w: w, apply: func(lo, hi int) error {
					if applied[k][0] < 0 {
						applied[k][0] = lo
					}
					applied[k][1] = hi
					for i := lo; i < hi; i++ {
						w[i] -= 2 * g[i]
					}
					return nil
				}}
			})
			for k := range tc.members {
				for i, x := range stepped[k] {
					if x != -2*got[0][i] {
						t.Fatalf("sharded, member %d element %d: %g, want %g", k, i, x, -2*got[0][i])
					}
				}
				lo, hi := ownChunk(tc.length, tc.members, k)
				if tc.members == 2 { // a swap of alike members: each updates everything
					lo, hi = 0, tc.length
				}
				if hi > lo && applied[k] != [2]int{lo, hi} {
					t.Fatalf("sharded, member %d updated [%d, %d), want [%d, %d)", k, applied[k][0], applied[k][1], lo, hi)
				}
			}
		})
	}
}

// allreduceEverywhere makes every stage of j keep its dense parameters by
// allreduce among its replicas.
func allreduceEverywhere(j *job) { allreduceWith(j, false) }

// mirrorEvery is the checkpoint interval of the jobs allreduceWith
// mirrors: their stages assign the servers their blocks every 3 steps.
const mirrorEvery = 3

// allreduceWith is allreduceEverywhere, each stage mirroring its blocks
// on the servers if mirror (the job made by newJobFrom with every stage
// marked), every mirrorEvery steps.
func allreduceWith(j *job, mirror bool) {
	j.configure = func(cfg *Config, trs map[string]*wire.TCPTransport) {
		n := j.replicas[cfg.Stage]
		peers := make([]string, n)
		for r := range n {
			peers[r] = nodeID(cfg.Stage, r)
		}
		me := peers[cfg.Replica]
		for r := range cfg.Replica {
			peerPair(j.t.(*testing.T), trs[me], me, trs[peers[r]], peers[r])
		}
		cfg.Allreduce = &Allreduce{Transport: trs[me], Peers: peers, TotalSteps: j.steps}
		if mirror {
			cfg.Allreduce.Mirror = j.clientAs(MirrorStage(cfg.Stage, len(j.stages)), 0, nodeID(cfg.Stage, cfg.Replica)+"-mirror")
			cfg.Allreduce.CheckpointEvery = mirrorEvery
		}
	}
}

// clientAs is a client of j's servers that pushes as replica of stage.
func (j *job) clientAs(stage, replica int, node string) *ps.Client {
	j.t.Helper()
	c, err := ps.NewClient(ps.ClientConfig{Job: testJob, Stage: stage, Replica: replica, Shards: psShards,
		Timeout: 20 * time.Second,
		Dial: func(ctx context.Context, _ int) (*wire.Conn, error) {
			return wire.Dial(ctx, j.psAddr, wireConfig(node), "ps")
		}})
	if err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(func() { c.Close() })
	return c
}

// denseOf returns every replica's dense values, stage by stage.
func denseOf(t *testing.T, ws [][]*Worker) [][]map[string][]float32 {
	t.Helper()
	out := make([][]map[string][]float32, len(ws))
	for st := range ws {
		for _, w := range ws[st] {
			v, err := w.denseValues()
			if err != nil {
				t.Fatal(err)
			}
			out[st] = append(out[st], v)
		}
	}
	return out
}

// allreduceDiff compares an allreduce job with a single-process model:
// the dense parameters held by replica 0 of each stage, and every table
// row on the parameter servers. Replicas must hold identical bytes.
func allreduceDiff(t *testing.T, j *job, ws [][]*Worker, ref *nn.Model) float64 {
	t.Helper()
	held := map[string][]float32{}
	for st, reps := range denseOf(t, ws) {
		for r, v := range reps {
			for name, x := range v {
				if r == 0 {
					held[name] = x
				} else if !slices.Equal(x, reps[0][name]) {
					t.Fatalf("stage %d: replica %d's %s differs from replica 0's", st, r, name)
				}
			}
		}
	}
	c := j.client(0, 0)
	all := iota64(testVocab)
	worst := 0.0
	for _, p := range ref.Params() {
		want, _ := native.Host(p.Value)
		got, ok := held[p.Name]
		if p.Sparse {
			var err error
			if got, _, err = c.Pull(context.Background(), p.Name, all, j.steps); err != nil {
				t.Fatal(err)
			}
			want, ok = tableRows(want, p.Cols, all), true
		}
		if !ok || len(got) != len(want) {
			t.Fatalf("%s: %d values held, %d in the model", p.Name, len(got), len(want))
		}
		for i := range got {
			d := math.Abs(float64(got[i]) - float64(want[i]))
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			worst = max(worst, d)
		}
	}
	return worst
}

// One replica per stage with allreduce: no ring traffic, the local
// optimiser runs the servers' kernel and schedule, so training stays
// bit-identical to single-process training (Adam, two stages).
func TestAllreduceOneReplicaEqualsSingleProcessBitForBit(t *testing.T) {
	checkLeaks(t)
	const steps, size = 5, 6
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), size) }
	j := newJob(t, cfg, []Range{{0, 2}, {3, 5}}, []int{1, 1}, steps, ps.BSP)
	allreduceEverywhere(j)
	ws := j.workers(func(int) func(context.Context, int64) (*data.Batch, error) { return fixedBatches(batch) })
	losses := j.train(ws, 1, steps)
	ref, refLosses := reference(t, cfg, steps, batch)
	if !slices.Equal(losses[0], refLosses) {
		t.Fatalf("losses %v, single-process %v", losses[0], refLosses)
	}
	if d := allreduceDiff(t, j, ws, ref); d != 0 {
		t.Fatalf("parameters differ from single-process training by up to %g, want bit-identical", d)
	}
	if _, v, err := j.client(0, 0).PullBlock(context.Background(), "fc3.weight", 0); err != nil || v != 0 {
		t.Fatalf("the servers' fc3.weight is at version %d (%v), want 0: dense gradients went to the servers too", v, err)
	}
}

// Data-parallel replicas with unequal batches reduce their gradients
// among themselves: after the steps every replica holds the same bytes,
// and the model equals single-process training on the stacked batch to
// float32 rounding (as the parameter servers' weighting does; tolerance
// 2e-6 after 4 SGD-momentum steps), also across a 2 -> 1 pipeline.
func TestAllreduceReplicasStayBitIdentical(t *testing.T) {
	checkLeaks(t)
	const steps, tolerance = 4, 2e-6
	cfg := modelConfig(t, sgdMomentum)
	sizes := []int{3, 5, 4, 6}
	for _, tc := range []struct {
		name     string
		stages   []Range
		replicas []int
		micro    int
	}{
		{"one stage, 2 replicas", []Range{{0, 5}}, []int{2}, 1},
		{"one stage, 3 replicas, 2 micro-batches", []Range{{0, 5}}, []int{3}, 2},
		{"one stage, 4 replicas", []Range{{0, 5}}, []int{4}, 1},
		{"2 replicas stacked into 1", []Range{{0, 3}, {4, 5}}, []int{2, 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.replicas[0]
			stacked := func(step int64) *data.Batch {
				var bs []*data.Batch
				for r := range n {
					bs = append(bs, testBatch(10+uint64(r), uint64(step), sizes[r]))
				}
				b, err := concatBatches(bs)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			ref, _ := reference(t, cfg, steps, stacked)
			j := newJob(t, cfg, tc.stages, tc.replicas, steps, ps.BSP)
			j.micro = tc.micro
			allreduceEverywhere(j)
			ws := j.workers(func(r int) func(context.Context, int64) (*data.Batch, error) {
				return fixedBatches(func(step int64) *data.Batch { return testBatch(10+uint64(r), uint64(step), sizes[r]) })
			})
			j.train(ws, 1, steps)
			d := allreduceDiff(t, j, ws, ref)
			t.Logf("largest difference from single-process training: %g", d)
			if d > tolerance || math.IsNaN(d) {
				t.Fatalf("parameters differ from single-process training by %g, tolerance %g", d, tolerance)
			}
		})
	}
}

// A resize that drops replica 1 of 3 from step k+1 rebuilds the ring from
// the members left: replicas 0 and 2 reduce between themselves with their
// new batches, stay bit-identical, and the model equals single-process
// training on the stacked batches of each step's members.
func TestAllreduceRingFollowsAResize(t *testing.T) {
	checkLeaks(t)
	const k, steps, tolerance = 2, 5, 2e-6
	cfg := modelConfig(t, sgdMomentum)
	before := Share{Members: []int{0, 1, 2}, Batches: []int{3, 5, 4}}
	after := Share{Members: []int{0, 2}, Batches: []int{7, 5}}
	batchOf := func(replica int, step int64, size int) *data.Batch {
		return testBatch(10+uint64(replica), uint64(step), size)
	}
	stacked := func(s Share, step int64) *data.Batch {
		var bs []*data.Batch
		for i, r := range s.Members {
			bs = append(bs, batchOf(r, step, s.Batches[i]))
		}
		b, err := concatBatches(bs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ref, _ := reference(t, cfg, steps, func(step int64) *data.Batch {
		if step > k {
			return stacked(after, step)
		}
		return stacked(before, step)
	})

	j := newJob(t, cfg, []Range{{0, 5}}, []int{3}, steps, ps.BSP)
	j.lastStep = steps
	allreduceEverywhere(j)
	trs := j.transports()
	var ws []*Worker
	for r := range 3 {
		input := func(_ context.Context, step int64, s Share) (*data.Batch, error) {
			_, b, ok := s.Of(r)
			if !ok {
				return nil, fmt.Errorf("replica %d asked for step %d's input while not a member", r, step)
			}
			return batchOf(r, step, b), nil
		}
		w := j.elasticWorker(trs, r, before, input)
		if from, err := w.Resize(k+1, after); err != nil || from != k+1 {
			t.Fatalf("replica %d: Resize = %d, %v; want %d", r, from, err, k+1)
		}
		ws = append(ws, w)
	}
	for _, s := range j.shards {
		if err := s.SetMembers(0, k+1, after.Members); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for r, w := range ws {
		wg.Go(func() {
			for step := int64(1); step <= steps && w.Member(step) && errs[r] == nil; step++ {
				_, errs[r] = w.Step(context.Background(), step)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", r, err)
		}
	}
	d := allreduceDiff(t, j, [][]*Worker{{ws[0], ws[2]}}, ref)
	t.Logf("largest difference from single-process training: %g", d)
	if d > tolerance || math.IsNaN(d) {
		t.Fatalf("parameters differ from single-process training by %g, tolerance %g", d, tolerance)
	}
}

// Replicas that disagree on a step's ring (a resize that reached them at
// different steps) fail the step, naming both rings, rather than mix them.
func TestRingRefusesAPredecessorWithOtherMembers(t *testing.T) {
	checkLeaks(t)
	trs, names := ringTransports(t, 3)
	a := Allreduce{Peers: names}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for k, members := range [][]int{{0, 1}, {0, 1, 2}} {
		wg.Go(func() {
			ak := a
			ak.Transport = trs[k]
			r, err := newRing(&ak, 1, 0, 1, members, k)
			if err == nil {
				err = r.reduce(ctx, 0, []float32{1, 2, 3}, 1, nil)
			}
			errs[k] = err
			cancel() // replica 0 waits for a replica 1 that has given up
		})
	}
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "different steps") {
		t.Fatalf("replica 1 (members 0, 1, 2) got %v from a predecessor with members 0, 1; want a refusal", errs[1])
	}
}

// A predecessor's piece that does not fit — other floats than the chunk
// holds, rows outside [1, 2^40], another parameter, or a float tensor of
// the wrong type — fails the reduction with what is wrong, before anything
// is added: the chunk the piece was for keeps this member's gradient. So
// for a ring of three and for a pair's swap (whose message is the whole
// gradient).
func TestRingRefusesAMalformedPieceBeforeAddingIt(t *testing.T) {
	checkLeaks(t)
	const param = 2
	for _, ring := range []struct {
		members int
		round   int
		floats  int // what the piece from member 0 holds
	}{{3, 0, 2}, {2, swapRound, 4}} {
		for _, tc := range []struct {
			name   string
			forge  func(m *wire.Message)
			reason string
		}{
			{"too few floats", func(m *wire.Message) { m.Tensors[0] = wire.F32Tensor([]float32{9}, 1) }, fmt.Sprintf("holds 1 floats, want %d", ring.floats)},
			{"zero rows", func(m *wire.Message) { m.Meta.Batch = 0 }, "carries 0 rows"},
			{"rows past 2^40", func(m *wire.Message) { m.Meta.Batch = 1<<40 + 1 }, "carries 1099511627777 rows"},
			{"another parameter", func(m *wire.Message) { m.Meta.Key = param + 1 }, "want step 1 parameter 2"},
			{"int64 values", func(m *wire.Message) { m.Tensors[0] = wire.I64Tensor(make([]int64, ring.floats), ring.floats) }, "float32"},
		} {
			t.Run(fmt.Sprintf("%d members, %s", ring.members, tc.name), func(t *testing.T) {
				trs, names := ringTransports(t, ring.members)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				r, err := newRing(&Allreduce{Transport: trs[1], Peers: names}, 1, 0, 1, iotaInts(ring.members), 1)
				if err != nil {
					t.Fatal(err)
				}
				m := &wire.Message{Type: wire.MsgGradient,
					Meta:    wire.Meta{Job: 1, Stage: 0, Replica: 0, Step: 1, Key: param, Micro: ringMicro(ring.round, 0), Batch: 3},
					Tensors: []wire.Tensor{wire.F32Tensor(slices.Repeat([]float32{9}, ring.floats), ring.floats), wire.I64Tensor(r.members64, ring.members)}}
				tc.forge(m)
				// Member 1 receives from member 0, whose place the test takes.
				if err := trs[0].Send(ctx, names[1], ringStream(0, 0, param), m); err != nil {
					t.Fatal(err)
				}
				g := []float32{1, 2, 3, 4}
				err = r.reduce(ctx, param, g, 1, nil)
				if err == nil || !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), "dense parameter 2") {
					t.Fatalf("reduce: %v, want an error naming the parameter and %q", err, tc.reason)
				}
				if !slices.Equal(g[:ring.floats], []float32{1, 2, 3, 4}[:ring.floats]) {
					t.Fatalf("the chunk the piece was for holds %v, want this member's", g[:ring.floats])
				}
			})
		}
	}
}

// At checkpoint steps (every mirrorEvery and the last) the ring's first
// member assigns the parameter servers its dense values and optimiser
// state, and only then: their blocks hold the replicas' bits at those
// steps, so a checkpoint of step k holds the allreduce job's state. A job restored from it ends
// bit-identical to the uninterrupted allreduce job, whether it synchronises
// by allreduce again (its replicas load the checkpoint's optimiser state
// with the values) or through the servers (equal batches of 4: the
// servers' weights 1/2 and the ring's 4/8 scale by powers of two, so both
// sum alike).
//
// Sharded, the ring's first member collects the other owners' chunks of
// the optimiser state for the mirror: the same holds, with 3 replicas too
// (restored by allreduce).
func TestAllreduceMirrorCheckpointRestores(t *testing.T) {
	for _, tc := range []struct {
		name           string
		replicas       int
		shard, restore bool
		relieve        []int
	}{{"replicated", 2, false, true, nil}, {"sharded", 2, true, true, nil}, {"sharded, 3 replicas", 3, true, true, nil},
		{"replicated, 3 replicas", 3, false, true, nil}, {"sharded, 4 replicas (halving)", 4, true, true, nil},
		{"sharded pair, replica 0 relieved", 2, true, true, []int{0}}, {"sharded pair, replica 1 relieved", 2, true, false, []int{1}}} {
		t.Run(tc.name, func(t *testing.T) { testMirror(t, tc.replicas, tc.shard, tc.restore, tc.relieve) })
	}
}

// testMirror trains an allreduce job of replicas (those in relieved
// relieved) with a mirror, checks the mirror against the replicas and, if
// restore, a restart from a checkpoint of its servers against the whole
// run.
func testMirror(t *testing.T, replicas int, shard, restore bool, relieved []int) {
	checkLeaks(t)
	const k, steps = mirrorEvery, 2 * mirrorEvery
	cfg := modelConfig(t, adamAdagrad)
	stages, marked := []Range{{0, 5}}, []bool{true}
	batches := func(r int) func(context.Context, int64) (*data.Batch, error) {
		return fixedBatches(func(step int64) *data.Batch { return testBatch(20+uint64(r), uint64(step), 4) })
	}
	mirrored := func(j *job) {
		allreduceWith(j, true)
		if shard {
			shardOptimiser(j)
		}
		if relieved != nil {
			relieve(j, relieved...)
		}
	}

	whole := newJobFrom(t, cfg, stages, []int{replicas}, steps, ps.BSP, marked, "")
	mirrored(whole)
	ws := whole.workers(batches)
	whole.train(ws, 1, k+1)
	mirror := whole.client(0, 0)
	for _, p := range ws[0][0].copies[0].dense {
		if v, err := mirror.PullBlockInto(context.Background(), p.Name, 0, make([]float32, p.Len())); err != nil || v != k {
			t.Fatalf("%s: the servers' mirror is at version %d after step %d (%v), want %d: assigned at checkpoint steps only", p.Name, v, k+1, err, k)
		}
	}
	whole.train(ws, k+2, steps)
	held := denseOf(t, ws)[0]
	for r := 1; r < replicas; r++ {
		if !maps.EqualFunc(held[0], held[r], slices.Equal) {
			t.Fatalf("replica %d holds other dense parameters than replica 0", r)
		}
	}
	if shard && !ws[0][0].local.shard {
		t.Fatal("the optimiser was not sharded")
	}
	for name, v := range held[0] {
		got, version, err := mirror.PullBlock(context.Background(), name, steps)
		if err != nil {
			t.Fatal(err)
		}
		if version != steps || !slices.Equal(got, v) {
			t.Fatalf("%s: the servers' mirror at version %d differs from the replicas'", name, version)
		}
	}
	checkMirrorState(t, mirror, ws[0], steps)

	if !restore {
		return
	}
	part := newJobFrom(t, cfg, stages, []int{replicas}, steps, ps.BSP, marked, "")
	mirrored(part)
	part.train(part.workers(batches), 1, k)
	dir, err := ps.CheckpointAll(context.Background(), t.TempDir(), k, part.shards)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The servers weigh pushes by b_k/Σb: by powers of two for a pair only,
	// where their sums repeat the ring's bit for bit.
	if replicas == 2 {
		t.Run("through the servers", func(t *testing.T) {
			restored := newJobFrom(t, cfg, stages, []int{replicas}, steps, ps.BSP, nil, dir)
			restored.train(restored.workers(batches), k+1, steps)
			for name, v := range held[0] {
				got, _, err := restored.client(0, 0).PullBlock(ctx, name, steps)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, v) {
					t.Fatalf("%s: restored at step %d and trained through the servers, differs from the allreduce run", name, k)
				}
			}
			sameRows(t, whole, restored, steps)
		})
	}
	t.Run("by allreduce", func(t *testing.T) {
		restored := newJobFrom(t, cfg, stages, []int{replicas}, steps, ps.BSP, marked, dir)
		mirrored(restored)
		rws := restored.workers(batches)
		restored.train(rws, k+1, steps)
		for r, got := range denseOf(t, rws)[0] {
			for name, v := range held[0] {
				if !slices.Equal(got[name], v) {
					t.Fatalf("replica %d: %s: restored at step %d and trained by allreduce, differs from the uninterrupted run", r, name, k)
				}
			}
		}
		sameRows(t, whole, restored, steps)
	})
}

// checkMirrorState fails t unless the servers' mirror holds, at step, the
// optimiser state of every dense parameter that each replica of ws owns:
// its chunk where the optimiser is sharded, all of it otherwise.
func checkMirrorState(t *testing.T, mirror *ps.Client, ws []*Worker, step int64) {
	t.Helper()
	for i, p := range ws[0].copies[0].dense {
		for k := range ws[0].local.state[i] {
			got := make([]float32, p.Len())
			if _, err := mirror.PullBlockStateInto(context.Background(), p.Name, step, ps.BlockValue+1+k, got); err != nil {
				t.Fatal(err)
			}
			for r, w := range ws {
				lo, hi := 0, p.Len()
				switch reducer := pairReducer(iotaInts(len(ws)), w.local.cfg.Relieve); {
				case w.local.shard && reducer >= 0 && r != reducer:
					hi = 0 // relieved: the reducer holds the state
				case w.local.shard && reducer < 0:
					lo, hi = ownedRange(w, i, len(ws), r)
				}
				have, err := hostFloats(w.cfg.Backend, w.local.state[i][k])
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[lo:hi], have[lo:hi]) {
					t.Fatalf("%s: the mirror's optimiser state %d differs from replica %d's in [%d, %d)", p.Name, k, r, lo, hi)
				}
			}
		}
	}
}

// sameRows fails t unless jobs a and b hold the same rows of both test
// tables at version steps.
func sameRows(t *testing.T, a, b *job, steps int64) {
	t.Helper()
	ids := iota64(testVocab)
	for _, name := range []string{"embedding0.table", "embedding1.table"} {
		x, _, errA := a.client(0, 0).Pull(context.Background(), name, ids, steps)
		y, _, errB := b.client(0, 0).Pull(context.Background(), name, ids, steps)
		if errA != nil || errB != nil || !slices.Equal(x, y) {
			t.Fatalf("%s: rows differ between the runs (%v, %v)", name, errA, errB)
		}
	}
}

// denseValues returns a copy of the stage's dense parameters' values by
// name, as the replica holds them now (between steps).
func (w *Worker) denseValues() (map[string][]float32, error) {
	out := map[string][]float32{}
	for _, p := range w.copies[0].dense {
		h, err := hostFloats(w.cfg.Backend, p.Value)
		if err != nil {
			return nil, err
		}
		out[p.Name] = append([]float32(nil), h[:p.Len()]...)
	}
	return out, nil
}

// allreduceSharded is allreduceEverywhere with each stage's optimiser
// sharded over its ring (Allreduce.ShardOptimiser).
func allreduceSharded(j *job) {
	allreduceEverywhere(j)
	shardOptimiser(j)
}

// shardOptimiser makes j's allreduce stages shard their optimisers.
func shardOptimiser(j *job) {
	alsoAllreduce(j, func(a *Allreduce) { a.ShardOptimiser = true })
}

// alsoAllreduce has change finish each allreduce stage's Allreduce after
// whatever else configures it.
func alsoAllreduce(j *job, change func(*Allreduce)) {
	plain := j.configure
	j.configure = func(cfg *Config, trs map[string]*wire.TCPTransport) {
		plain(cfg, trs)
		change(cfg.Allreduce)
	}
}

// Sharding the optimiser over the ring trains the same bits as every
// replica updating every parameter (Adam, unequal batches, 2 and 3
// replicas, 2 micro-batches), and does shard it: a replica's optimiser
// state has moved on its own chunk of each parameter only.
func TestShardedOptimiserTrainsTheSameBits(t *testing.T) {
	checkLeaks(t)
	const steps = 4
	cfg := modelConfig(t, adamAdagrad)
	sizes := []int{3, 5, 4, 6}
	for _, tc := range []struct {
		replicas, micro int
		fused           bool
	}{{2, 1, true}, {3, 2, true}, {4, 1, true}, {3, 2, false}, {4, 1, false}} {
		t.Run(fmt.Sprintf("%d replicas, %d micro-batches, fused %v", tc.replicas, tc.micro, tc.fused), func(t *testing.T) {
			if !tc.fused {
				withoutFusion(t)
			}
			train := func(shard bool) ([][]float64, []*Worker) {
				j := newJob(t, cfg, []Range{{0, 5}}, []int{tc.replicas}, steps, ps.BSP)
				j.micro = tc.micro
				if shard {
					allreduceSharded(j)
				} else {
					allreduceEverywhere(j)
				}
				ws := j.workers(func(r int) func(context.Context, int64) (*data.Batch, error) {
					return fixedBatches(func(step int64) *data.Batch { return testBatch(10+uint64(r), uint64(step), sizes[r]) })
				})
				return j.train(ws, 1, steps), ws[0]
			}
			replicatedLosses, replicated := train(false)
			shardedLosses, sharded := train(true)
			if !slices.EqualFunc(shardedLosses, replicatedLosses, slices.Equal) {
				t.Fatalf("losses %v sharded, %v replicated", shardedLosses, replicatedLosses)
			}
			want := denseOf(t, [][]*Worker{replicated})[0]
			for r, got := range denseOf(t, [][]*Worker{sharded})[0] {
				for name, v := range got {
					if !slices.Equal(v, want[r][name]) {
						t.Fatalf("replica %d: %s sharded differs from replicated", r, name)
					}
				}
			}
			for r, w := range sharded {
				for i, p := range w.copies[0].dense {
					lo, hi := ownedRange(w, i, tc.replicas, r)
					if tc.replicas == 2 { // a swap of alike members: each updates everything
						lo, hi = 0, p.Len()
					}
					checkMoved(t, fmt.Sprintf("sharded replica %d, %s", r, p.Name), firstMoment(t, w, i), lo, hi)
				}
			}
			m := firstMoment(t, replicated[0], 0)
			if lo, hi := ownedRange(replicated[0], 0, tc.replicas, 0); tc.replicas > 2 && !slices.ContainsFunc(m[:lo], nonZero) && !slices.ContainsFunc(m[hi:], nonZero) {
				t.Fatal("replicated: replica 0's first moment did not move outside its chunk; the check above proves nothing")
			}
		})
	}
}

// ownedRange is the part of worker w's dense parameter i that member pos
// of a ring of members finishes, and so updates when sharded: its share of
// the chunk of the reduction it belongs to (a bucket of several parameters,
// or itself alone). Possibly empty.
func ownedRange(w *Worker, i, members, pos int) (lo, hi int) {
	for _, b := range w.local.buckets {
		k := slices.Index(b.params, i)
		if k < 0 {
			continue
		}
		clo, chi := ownChunk(b.offs[len(b.params)], members, pos)
		n := b.offs[k+1] - b.offs[k]
		lo = min(max(clo-b.offs[k], 0), n)
		hi = max(min(max(chi-b.offs[k], 0), n), lo)
		return lo, hi
	}
	panic(fmt.Sprintf("dense parameter %d is in no bucket", i))
}

// withoutFusion reduces every dense parameter alone for the rest of t.
func withoutFusion(t *testing.T) {
	old := fuseFloats
	fuseFloats = 0
	t.Cleanup(func() { fuseFloats = old })
}

// ownChunk is the chunk of a parameter of n floats that member pos of a
// ring of members finishes, and so updates when sharded.
func ownChunk(n, members, pos int) (lo, hi int) {
	b := chunks(n, members)
	c := ownedChunk(pos, members, n)
	return b[c], b[c+1]
}

func nonZero(x float32) bool { return x != 0 }

// firstMoment is worker w's Adam first moment of dense parameter i.
func firstMoment(t *testing.T, w *Worker, i int) []float32 {
	t.Helper()
	m, ok := native.Host(w.local.state[i][0])
	if !ok {
		t.Fatal("the optimiser state is not in host memory")
	}
	return m
}

// checkMoved fails unless m is zero outside [lo, hi) and not all zero in it.
func checkMoved(t *testing.T, what string, m []float32, lo, hi int) {
	t.Helper()
	if slices.ContainsFunc(m[:lo], nonZero) || slices.ContainsFunc(m[hi:], nonZero) {
		t.Fatalf("%s: the optimiser state moved outside the replica's chunk [%d, %d) of %d", what, lo, hi, len(m))
	}
	if hi > lo && !slices.ContainsFunc(m[lo:hi], nonZero) {
		t.Fatalf("%s: the optimiser state did not move in the replica's chunk [%d, %d)", what, lo, hi)
	}
}

// A stage that shards its optimiser over its ring may change its batches,
// not its members: a replica's state covers its own chunk only.
func TestShardedOptimiserRefusesNewMembers(t *testing.T) {
	checkLeaks(t)
	cfg := modelConfig(t, adamAdagrad)
	j := newJob(t, cfg, []Range{{0, 5}}, []int{2}, 3, ps.BSP)
	allreduceSharded(j)
	w := j.elasticWorker(j.transports(), 0, Share{Members: []int{0, 1}, Batches: []int{3, 5}},
		func(context.Context, int64, Share) (*data.Batch, error) { return nil, errors.New("not read") })
	if _, err := w.Resize(2, Share{Members: []int{0}, Batches: []int{8}}); err == nil || !strings.Contains(err.Error(), "shards its optimiser") {
		t.Errorf("dropping a replica of a sharded ring: %v, want a refusal naming the sharding", err)
	}
	if from, err := w.Resize(2, Share{Members: []int{0, 1}, Batches: []int{4, 4}}); err != nil || from != 2 {
		t.Errorf("new batches for the same members: %d, %v; want from step 2", from, err)
	}
}

// A pair of members swaps whole gradients: a member finishes its
// reduction from the other's message alone, without the other reading
// anything or passing a chunk back (the ring's second round), and holds
// the rows-weighted mean.
func TestPairFinishesFromTheOthersGradientAlone(t *testing.T) {
	checkLeaks(t)
	trs, names := ringTransports(t, 2)
	a := &Allreduce{Peers: names}
	grads := [][]float32{{1, 2, 3, 4, 5}, {-3, 0, 9, 4, 1}}
	rows := []int{1, 3}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ak := *a
	ak.Transport = trs[1]
	r1, err := newRing(&ak, 1, 0, 1, []int{0, 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	x := r1.exchange(ctx, 3, 0, 0, ringStream)
	if err := x.send(swapRound, 0, grads[1], rows[1]); err != nil {
		t.Fatal(err)
	}
	ak.Transport = trs[0]
	r0, err := newRing(&ak, 1, 0, 1, []int{0, 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := slices.Clone(grads[0])
	if err := r0.reduce(ctx, 3, g, rows[0], nil); err != nil {
		t.Fatalf("member 0, with member 1 only sending: %v", err)
	}
	for i, v := range g {
		want := (float64(grads[0][i]) + 3*float64(grads[1][i])) / 4
		if math.Abs(float64(v)-want) > 1e-6 {
			t.Fatalf("element %d: %g, want %g", i, v, want)
		}
	}
}

// A pair whose messages name other kernels sums portably: both members
// hold the same bytes, and they are the products rounded to float32, then
// the sum, whatever the machine's fused multiply-add would give; sharded,
// each member updates its own chunk only and takes the other's values.
func TestPairWithOtherKernelsSumsPortably(t *testing.T) {
	checkLeaks(t)
	const n = 2*ringPiece + 5
	trs, names := ringTransports(t, 2)
	rng := rand.New(rand.NewPCG(7, 8))
	grads := make([][]float32, 2)
	for k := range grads {
		for range n {
			grads[k] = append(grads[k], rng.Float32()*2-1)
		}
	}
	rows := []int{3, 7}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // members that disagree fail, not hang
	defer cancel()
	out := make([][]float32, 2)
	applied := make([][2]int, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Go(func() {
			r, err := newRing(&Allreduce{Transport: trs[k], Peers: names}, 1, 0, 1, []int{0, 1}, k)
			if err != nil {
				errs[k] = err
				return
			}
			r.kernels += fmt.Sprintf(" (member %d)", k)
			g := slices.Clone(grads[k])
			w := make([]float32, n)
			applied[k] = [2]int{-1, -1}
			u := &ownerUpdate{w: w, apply: func(lo, hi int) error {
				if applied[k][0] < 0 {
					applied[k][0] = lo
				}
				applied[k][1] = hi
				for i := lo; i < hi; i++ {
					w[i] = 1 - g[i]
				}
				return nil
			}}
			errs[k] = r.reduce(ctx, 3, g, rows[k], u)
			out[k] = w
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(out[0], out[1]) {
		t.Fatal("the members hold other bytes")
	}
	w0, w1 := float32(3)/float32(10), float32(7)/float32(10)
	for i, v := range out[0] {
		p0, p1 := float32(w0*grads[0][i]), float32(w1*grads[1][i])
		if want := 1 - (p0 + p1); v != want {
			t.Fatalf("element %d: %g, want %g (products rounded, then summed)", i, v, want)
		}
	}
	for k := range 2 {
		if lo, hi := ownChunk(n, 2, k); applied[k] != [2]int{lo, hi} {
			t.Fatalf("member %d updated %v, its chunk is [%d, %d)", k, applied[k], lo, hi)
		}
	}
}

// Replicas whose kernels differ (one on the scalar reference, the others
// on the machine's widest ISA) stay bit-identical with the optimiser
// sharded, as node daemons run it: each replica owns the update of its
// chunk, and the mirror of a checkpointing job gets each owner's chunk of
// the optimiser state. Two replicas (a swap) and four (the ring).
func TestReplicasOnOtherISAsStayBitIdentical(t *testing.T) {
	checkLeaks(t)
	best, err := native.BestISA()
	if err != nil || best == native.Scalar {
		t.Skipf("this CPU runs scalar kernels only (%v): no other ISA to pair them with", err)
	}
	scalar := native.Scalar
	slow, err := native.NewCPU(native.CPUOptions{ISA: &scalar})
	if err != nil {
		t.Fatal(err)
	}
	const steps = 3
	cfg := modelConfig(t, adamAdagrad)
	for _, tc := range []struct {
		replicas int
		mirror   bool
	}{{2, false}, {4, false}, {2, true}, {4, true}} {
		replicas := tc.replicas
		t.Run(fmt.Sprintf("%d replicas, mirror %v", replicas, tc.mirror), func(t *testing.T) {
			j := newJobFrom(t, cfg, []Range{{0, 5}}, []int{replicas}, steps, ps.BSP, []bool{tc.mirror}, "")
			allreduceWith(j, tc.mirror)
			shardOptimiser(j)
			sharded := j.configure
			j.configure = func(c *Config, trs map[string]*wire.TCPTransport) {
				sharded(c, trs)
				if c.Replica == 1 {
					c.Backend = slow
				}
			}
			ws := j.workers(func(r int) func(context.Context, int64) (*data.Batch, error) {
				return fixedBatches(func(step int64) *data.Batch { return testBatch(10+uint64(r), uint64(step), 3+2*r) })
			})
			j.train(ws, 1, steps)
			got := denseOf(t, ws)[0]
			for r := 1; r < replicas; r++ {
				for name, v := range got[0] {
					if !slices.Equal(v, got[r][name]) {
						t.Fatalf("%s: replica %d holds other bytes than replica 0 (replica 1 runs scalar kernels, the others %s)", name, r, best)
					}
				}
			}
			if tc.mirror { // the first replica collected the others' state for it
				checkMirrorState(t, j.client(0, 0), ws[0], steps)
				return
			}
			for r, w := range ws[0] {
				for i, p := range w.copies[0].dense {
					lo, hi := ownedRange(w, i, replicas, r)
					checkMoved(t, fmt.Sprintf("replica %d, %s", r, p.Name), firstMoment(t, w, i), lo, hi)
				}
			}
		})
	}
}

// TestMirrorsAtEveryGridAndLastStep: the mirror assigns at the multiples
// of the checkpoint interval and of the grid, and at the last step.
func TestMirrorsAtEveryGridAndLastStep(t *testing.T) {
	a := Allreduce{TotalSteps: 1000, CheckpointEvery: 100, CheckpointGrid: 30}
	for step, want := range map[int64]bool{30: true, 60: true, 100: true, 99: false, 110: false, 1000: true, 990: true, 998: false} {
		if got := a.MirrorsAt(step); got != want {
			t.Errorf("step %d: %v, want %v", step, got, want)
		}
	}
	if (&Allreduce{TotalSteps: 10}).MirrorsAt(5) {
		t.Error("mirrors at step 5 with neither an interval nor a grid")
	}
}

// TestNextMirrorStepIsOneItMirrorsAt: the next mirrored step from any
// step is one MirrorsAt, and none between them is.
func TestNextMirrorStepIsOneItMirrorsAt(t *testing.T) {
	for _, a := range []Allreduce{{TotalSteps: 1000, CheckpointEvery: 100, CheckpointGrid: 30}, {TotalSteps: 1000, CheckpointGrid: 400}, {TotalSteps: 50}} {
		for from := int64(1); from <= a.TotalSteps; from++ {
			next := a.NextMirrorStep(from)
			if next < from || !a.MirrorsAt(next) {
				t.Fatalf("%+v from %d: %d", a, from, next)
			}
			for s := from; s < next; s++ {
				if a.MirrorsAt(s) {
					t.Fatalf("%+v from %d: %d, but it mirrors at %d", a, from, next, s)
				}
			}
		}
	}
}

// relieve makes j's allreduce stages list replicas as relieved
// (Allreduce.Relieve).
func relieve(j *job, replicas ...int) {
	alsoAllreduce(j, func(a *Allreduce) { a.Relieve = replicas })
}

// In a pair with one member relieved, the other sums, updates every piece
// (three here) and sends the new values back: both end with the same
// values, the relieved member's update never runs, and at a mirror's step
// the ring's first member holds the reducer's optimiser state.
func TestPairReducerUpdatesAloneAndReturnsTheValues(t *testing.T) {
	checkLeaks(t)
	const n = 2*ringPiece + 5
	for _, relieved := range []int{0, 1} {
		t.Run(fmt.Sprintf("replica %d relieved", relieved), func(t *testing.T) {
			trs, names := ringTransports(t, 2)
			grads := [][]float32{make([]float32, n), make([]float32, n)}
			start := make([]float32, n)
			for i := range n {
				grads[0][i], grads[1][i], start[i] = float32(i%7), float32(i%5)-2, float32(i%3)
			}
			rows := []int{1, 3}
			us := make([]*ownerUpdate, 2)
			applied := make([][][2]int, 2)
			gs := make([][]float32, 2)
			for k := range us {
				gs[k] = slices.Clone(grads[k])
				st := native.HostBuffer(make([]float32, n))
				u := &ownerUpdate{w: slices.Clone(start), state: []native.HostBuffer{st}, snapshot: true}
				u.apply = func(lo, hi int) error {
					applied[k] = append(applied[k], [2]int{lo, hi})
					for i := lo; i < hi; i++ {
						u.w[i] -= 0.5 * gs[k][i]
						st[i] += gs[k][i]
					}
					return nil
				}
				us[k] = u
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for k := range 2 {
				wg.Go(func() {
					r, err := newRing(&Allreduce{Transport: trs[k], Peers: names, Relieve: []int{relieved}}, 1, 0, 1, []int{0, 1}, k)
					if err == nil {
						err = r.reduce(ctx, 0, gs[k], rows[k], us[k])
					}
					errs[k] = err
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			reducer := 1 - relieved
			if len(applied[relieved]) != 0 {
				t.Fatalf("the relieved replica updated %v", applied[relieved])
			}
			if want := [][2]int{{0, ringPiece}, {ringPiece, 2 * ringPiece}, {2 * ringPiece, n}}; !slices.Equal(applied[reducer], want) {
				t.Fatalf("the reducer updated %v, want %v", applied[reducer], want)
			}
			for i := range n {
				mean := (float32(rows[0])/4)*grads[0][i] + (float32(rows[1])/4)*grads[1][i]
				if want := start[i] - 0.5*mean; math.Abs(float64(us[0].w[i]-want)) > 1e-5 {
					t.Fatalf("element %d: %g, want %g", i, us[0].w[i], want)
				}
			}
			if !slices.Equal(us[0].w, us[1].w) {
				t.Fatal("the members hold different values")
			}
			if !slices.Equal(us[0].state[0], us[reducer].state[0]) {
				t.Fatal("the ring's first member does not hold the reducer's optimiser state at a mirror's step")
			}
			if relieved == 1 && slices.ContainsFunc(us[1].state[0], nonZero) {
				t.Fatal("the relieved second member's optimiser state moved")
			}
		})
	}
}

// A pair sharding its optimiser with one member relieved trains the bits
// of a pair that each update everything (Adam, unequal batches), and only
// the reducer's optimiser state moves. Where both or neither are relieved
// the pair swaps as before.
func TestRelievedPairTrainsTheSameBits(t *testing.T) {
	checkLeaks(t)
	const steps = 4
	cfg := modelConfig(t, adamAdagrad)
	sizes := []int{3, 5}
	train := func(configure func(*job)) ([][]float64, []*Worker) {
		j := newJob(t, cfg, []Range{{0, 5}}, []int{2}, steps, ps.BSP)
		configure(j)
		ws := j.workers(func(r int) func(context.Context, int64) (*data.Batch, error) {
			return fixedBatches(func(step int64) *data.Batch { return testBatch(30+uint64(r), uint64(step), sizes[r]) })
		})
		return j.train(ws, 1, steps), ws[0]
	}
	wantLosses, replicated := train(allreduceEverywhere)
	want := denseOf(t, [][]*Worker{replicated})[0]
	for _, relieved := range [][]int{{0}, {1}, {0, 1}} {
		t.Run(fmt.Sprint("relieved ", relieved), func(t *testing.T) {
			losses, ws := train(func(j *job) { allreduceSharded(j); relieve(j, relieved...) })
			if !slices.EqualFunc(losses, wantLosses, slices.Equal) {
				t.Fatalf("losses %v, %v with every replica updating", losses, wantLosses)
			}
			for r, got := range denseOf(t, [][]*Worker{ws})[0] {
				if !maps.EqualFunc(got, want[r], slices.Equal) {
					t.Fatalf("replica %d: dense parameters differ from the replicated pair's", r)
				}
			}
			for r, w := range ws {
				moves := len(relieved) == 2 || !slices.Contains(relieved, r)
				for i, p := range w.copies[0].dense {
					hi := 0
					if moves {
						hi = p.Len()
					}
					checkMoved(t, fmt.Sprintf("replica %d, %s", r, p.Name), firstMoment(t, w, i), 0, hi)
				}
			}
		})
	}
}

// A relieved replica must be one of the stage's.
func TestAllreduceRefusesARelievedReplicaOutsideTheStage(t *testing.T) {
	for _, tc := range []struct {
		relieve []int
		ok      bool
	}{{nil, true}, {[]int{0}, true}, {[]int{1}, false}, {[]int{-1}, false}} {
		a := &Allreduce{Peers: []string{"a"}, Relieve: tc.relieve}
		err := a.check(0, 0, 1)
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "relieve")) {
			t.Errorf("relieve %v: %v", tc.relieve, err)
		}
	}
}

// An allreduce configuration that the ring's stream numbering cannot
// carry, or that cannot run, is refused before the first step, naming
// what is wrong; one at each bound is taken.
func TestAllreduceRefusesWhatTheRingCannotRun(t *testing.T) {
	two := []string{"a", "b"}
	var tr wire.Transport = (*wire.TCPTransport)(nil) // check only asks whether there is one
	for _, tc := range []struct {
		name                   string
		a                      Allreduce
		stage, replica, params int
		want                   string // "" for accepted
	}{
		{"at the bounds", Allreduce{Peers: two, Transport: tr}, maxRingStages - 1, 1, maxRingParams, ""},
		{"stage past the numbering", Allreduce{Peers: two, Transport: tr}, maxRingStages, 0, 1, "stage 256"},
		{"too many parameters", Allreduce{Peers: two, Transport: tr}, 0, 0, maxRingParams + 1, "1025 dense parameters"},
		{"replica outside the peers", Allreduce{Peers: two, Transport: tr}, 0, 2, 1, "replica 2 of 2 peers"},
		{"two peers, no transport", Allreduce{Peers: two}, 0, 0, 1, "no transport"},
		{"one peer needs no transport", Allreduce{Peers: []string{"a"}}, 0, 0, 1, ""},
		{"negative checkpoint interval", Allreduce{Peers: two, Transport: tr, CheckpointEvery: -1}, 0, 0, 1, "checkpoints every -1"},
		{"mirror without checkpoints", Allreduce{Peers: two, Transport: tr, Mirror: &ps.Client{}}, 0, 0, 1, "a mirror with checkpoints every 0"},
		{"mirror on the grid", Allreduce{Peers: two, Transport: tr, Mirror: &ps.Client{}, CheckpointGrid: 5}, 0, 0, 1, ""},
	} {
		err := tc.a.check(tc.stage, tc.replica, tc.params)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// RingLinks gives each pair of replicas one greeting stream, the same at
// both ends, distinct from every other pair's and from the ring's own
// streams.
func TestRingLinksGiveEachPairOneStream(t *testing.T) {
	peers := []string{"n0", "n1", "n2", "n3"}
	streams := map[[2]string]uint32{}
	seen := map[uint32][2]string{}
	for r := range peers {
		links := RingLinks(nil, 3, r, peers)
		if len(links) != len(peers)-1 {
			t.Fatalf("replica %d: %d links, want %d", r, len(links), len(peers)-1)
		}
		for _, l := range links {
			if l.Peer == peers[r] {
				t.Fatalf("replica %d links to itself", r)
			}
			pair := [2]string{min(l.Peer, peers[r]), max(l.Peer, peers[r])}
			if s, ok := streams[pair]; ok && s != l.Stream {
				t.Fatalf("pair %v: streams %#x and %#x at its two ends", pair, s, l.Stream)
			}
			if other, ok := seen[l.Stream]; ok && other != pair {
				t.Fatalf("stream %#x serves %v and %v", l.Stream, other, pair)
			}
			streams[pair], seen[l.Stream] = l.Stream, pair
			for from := range peers {
				for param := range 4 {
					if l.Stream == ringStream(3, from, param) || l.Stream == mirrorStream(3, from, param) {
						t.Fatalf("greeting stream %#x is also a ring stream", l.Stream)
					}
				}
			}
		}
	}
	if len(streams) != 6 {
		t.Fatalf("%d pairs linked, want 6", len(streams))
	}
}
