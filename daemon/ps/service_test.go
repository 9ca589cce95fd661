package ps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/daemon/wire/wiretest"
	"go.uber.org/goleak"
)

func checkLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func wireConfig(node string) wire.Config {
	return wire.Config{NodeID: node, Plain: true, Logger: quiet}
}

// served starts a service for shards on a loopback listener and returns
// its address; the cleanup stops it and waits for it.
func served(t *testing.T, opts ServiceOptions, shards ...*Shard) string {
	t.Helper()
	opts.Logger = quiet
	svc, err := NewService(opts, shards...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := wire.Listen("127.0.0.1:0", wireConfig("ps"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := svc.Serve(ctx, ln); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		ln.Close()
	})
	return ln.Addr().String()
}

func dialer(addr string) func(context.Context, int) (*wire.Conn, error) {
	return func(ctx context.Context, _ int) (*wire.Conn, error) {
		return wire.Dial(ctx, addr, wireConfig("worker"), "ps")
	}
}

func newClient(t *testing.T, addr string, shards, replica int) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{Job: "j", Stage: 0, Replica: replica, Shards: shards,
		Dial: dialer(addr), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// localClient returns a client of job "j" whose one shard is shard, in
// this process.
func localClient(t *testing.T, shard *Shard) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{Job: "j", Shards: 1, Timeout: 5 * time.Second,
		Dial:  func(context.Context, int) (*wire.Conn, error) { return nil, errors.New("the shard is local") },
		Local: func(int) *Shard { return shard }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// twoShards returns shards 0 and 1 of job "j" with the block placed by
// BlockShard.
func twoShards(t *testing.T, replicas int) []*Shard {
	t.Helper()
	var out []*Shard
	for i := range 2 {
		cfg := testConfig(t, BSP, i, 2, replicas, adam)
		cfg.Blocks = nil
		if BlockShard(testBlock, 2) == i {
			cfg.Blocks = testConfig(t, BSP, 0, 2, replicas, adam).Blocks
		}
		s, err := NewShard(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// The client over two served shards computes exactly what the same calls
// on two in-process shards compute.
func TestClientMatchesShardsInProcess(t *testing.T) {
	checkLeaks(t)
	remote, local := twoShards(t, 1), twoShards(t, 1)
	c := newClient(t, served(t, ServiceOptions{}, remote...), 2, 0)
	checkClientAgainstShards(t, c, local)
}

// A client with shard 0 in its own process calls it directly (it never
// dials it) and still computes what the in-process shards compute; shard 1
// goes over the wire. Only a client with every shard in the process is
// AllLocal.
func TestClientCallsLocalShardsDirectly(t *testing.T) {
	checkLeaks(t)
	mixed, local := twoShards(t, 1), twoShards(t, 1)
	addr := served(t, ServiceOptions{}, mixed[1])
	var dialled0 atomic.Bool
	c, err := NewClient(ClientConfig{Job: "j", Stage: 0, Replica: 0, Shards: 2, Timeout: 5 * time.Second,
		Dial: func(ctx context.Context, shard int) (*wire.Conn, error) {
			if shard == 0 {
				dialled0.Store(true)
				return nil, errors.New("shard 0 is local")
			}
			return dialer(addr)(ctx, shard)
		},
		Local: func(shard int) *Shard {
			if shard == 0 {
				return mixed[0]
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	checkClientAgainstShards(t, c, local)
	if dialled0.Load() {
		t.Error("the client dialled its local shard")
	}
	if c.AllLocal() {
		t.Error("AllLocal with shard 1 over the wire")
	}
	all, err := NewClient(ClientConfig{Job: "j", Shards: 2, Local: func(shard int) *Shard { return local[shard] },
		Dial: func(context.Context, int) (*wire.Conn, error) { return nil, errors.New("every shard is local") }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { all.Close() })
	if !all.AllLocal() {
		t.Error("not AllLocal with both shards in the process")
	}
}

// checkClientAgainstShards runs three steps of pulls and pushes through c
// and the same calls on the shards of local, comparing every pull (of
// blocks both into a new slice and into the caller's buffer).
func checkClientAgainstShards(t *testing.T, c *Client, local []*Shard) {
	t.Helper()
	ctx := context.Background()
	n := len(local)
	rng := rand.New(rand.NewPCG(3, 4))
	ids := []int64{7, 3, 7, 100, 12, 5, 3} // repeats, over both shards of two
	distinct := []int64{3, 5, 7, 12, 100}
	into := make([]float32, testLen)

	for step := int64(1); step <= 3; step++ {
		got, v, err := c.Pull(ctx, testTable, ids, step-1)
		if err != nil {
			t.Fatal(err)
		}
		if v != step-1 {
			t.Fatalf("step %d: pulled at version %d", step, v)
		}
		want := make([]float32, 0, len(got))
		for _, id := range ids {
			s := local[ShardOf(id, n)]
			want = append(want, pullRows(t, s, []int64{id}, step-1)...)
		}
		if !bitsEqual(got, want) {
			t.Fatalf("step %d: pulled rows differ from the in-process shards", step)
		}
		g := randFloats(rng, len(distinct)*testDim)
		if err := c.PushRows(ctx, testTable, step, 4, distinct, g, testDim); err != nil {
			t.Fatal(err)
		}
		byShard, at := Partition(distinct, n)
		for i, s := range local {
			var gi []float32
			for _, pos := range at[i] {
				gi = append(gi, g[pos*testDim:(pos+1)*testDim]...)
			}
			mustPushRows(t, s, id(0, step), 4, byShard[i], gi)
		}
		gb := randFloats(rng, testLen)
		if err := c.PushBlock(ctx, testBlock, step, 4, gb); err != nil {
			t.Fatal(err)
		}
		owner := local[BlockShard(testBlock, n)]
		mustPushBlock(t, owner, id(0, step), 4, gb)
		block, v, err := c.PullBlock(ctx, testBlock, step)
		if err != nil {
			t.Fatal(err)
		}
		wantBlock := pullBlock(t, owner, step)
		if v != step || !bitsEqual(block, wantBlock) {
			t.Fatalf("step %d: block at version %d differs from the in-process shard", step, v)
		}
		if v, err = c.PullBlockInto(ctx, testBlock, step, into); err != nil {
			t.Fatal(err)
		}
		if v != step || !bitsEqual(into, wantBlock) {
			t.Fatalf("step %d: block pulled into a buffer at version %d differs from the in-process shard", step, v)
		}
		checkBlockState(t, c, owner, step)
	}
	if _, err := c.PullBlockInto(ctx, testBlock, 0, make([]float32, testLen+1)); err == nil {
		t.Error("a block pulled into a buffer of the wrong length: no error")
	}
}

// checkBlockState checks the client's pulls of every part of the test
// block at step against owner's values and optimiser state, and that it
// refuses a part past the optimiser's.
func checkBlockState(t *testing.T, c *Client, owner *Shard, step int64) {
	t.Helper()
	b := owner.blocks[testBlock]
	into := make([]float32, testLen)
	for part := range len(b.state) + 1 {
		v, err := c.PullBlockStateInto(context.Background(), testBlock, step, part, into)
		if err != nil {
			t.Fatal(err)
		}
		want := b.value
		if part > BlockValue {
			want = b.state[part-1]
		}
		if v != step || !bitsEqual(into, want) {
			t.Fatalf("step %d: part %d of the block, at version %d, differs from the in-process shard's", step, part, v)
		}
	}
	if len(b.state) == 0 {
		t.Fatal("the test block's optimiser keeps no state")
	}
	_, err := c.PullBlockStateInto(context.Background(), testBlock, step, len(b.state)+1, into)
	if err == nil || !strings.Contains(err.Error(), "state buffer") {
		t.Fatalf("part %d of a block whose optimiser keeps %d state buffers: %v", len(b.state)+1, len(b.state), err)
	}
}

// oneShard returns the only shard of job "j".
func oneShard(t *testing.T) []*Shard {
	t.Helper()
	s, err := NewShard(testConfig(t, BSP, 0, 1, 1, adam))
	if err != nil {
		t.Fatal(err)
	}
	return []*Shard{s}
}

// With one shard the client neither splits ids nor gathers rows
// (Client.partition): over the wire and in process it still computes what
// the shard computes.
func TestOneShardClientMatchesShard(t *testing.T) {
	checkLeaks(t)
	t.Run("wire", func(t *testing.T) {
		c := newClient(t, served(t, ServiceOptions{}, oneShard(t)...), 1, 0)
		checkClientAgainstShards(t, c, oneShard(t))
	})
	t.Run("local", func(t *testing.T) {
		checkClientAgainstShards(t, localClient(t, oneShard(t)[0]), oneShard(t))
	})
}

// request sends one raw request on shard 0's stream and returns the reply.
func request(t *testing.T, conn *wire.Conn, m *wire.Message) *wire.MessageView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn.Send(ctx, ShardStream(0), m); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.Recv(ctx, ShardStream(0))
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

func TestServiceRejectsMalformedRequestsAndKeepsServing(t *testing.T) {
	checkLeaks(t)
	shard := newTestShard(t, BSP, 1, adam)
	addr := served(t, ServiceOptions{MaxIDs: 8}, shard)
	conn, err := dialer(addr)(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	job, table, block := JobKey("j"), ParamKey(testTable), ParamKey(testBlock)
	push := wire.Meta{Job: job, Key: table, Step: 1, Batch: 2}
	ids2 := wire.I64Tensor([]int64{1, 2}, 2)
	cases := []struct {
		name, reason string
		m            wire.Message
	}{
		{"unknown job", "no shard 0", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: JobKey("other"), Key: table}, Tensors: []wire.Tensor{ids2}}},
		{"unknown table", "no table or block", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: ParamKey("nope")}, Tensors: []wire.Tensor{ids2}}},
		{"table pulled as a block", "it is a table", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: table}}},
		{"block pulled with ids", "it is a block", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: block}, Tensors: []wire.Tensor{ids2}}},
		{"float ids", "int64 [n] ids", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: table}, Tensors: []wire.Tensor{wire.F32Tensor([]float32{1}, 1)}}},
		{"too many ids", "limit 8", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: table}, Tensors: []wire.Tensor{wire.I64Tensor(make([]int64, 9), 9)}}},
		{"gradient rows short", "gradient shape", wire.Message{Type: wire.MsgPushSparse, Meta: push, Tensors: []wire.Tensor{ids2, wire.F32Tensor(make([]float32, testDim), 1, testDim)}}},
		{"gradient width wrong", "gradient shape", wire.Message{Type: wire.MsgPushSparse, Meta: push, Tensors: []wire.Tensor{ids2, wire.F32Tensor(make([]float32, 2*(testDim+1)), 2, testDim+1)}}},
		{"sparse push without gradient", "tensors", wire.Message{Type: wire.MsgPushSparse, Meta: push, Tensors: []wire.Tensor{ids2}}},
		{"duplicate ids", "listed twice", wire.Message{Type: wire.MsgPushSparse, Meta: push, Tensors: []wire.Tensor{wire.I64Tensor([]int64{4, 4}, 2), wire.F32Tensor(make([]float32, 2*testDim), 2, testDim)}}},
		{"zero weight", "weight", wire.Message{Type: wire.MsgPushSparse, Meta: wire.Meta{Job: job, Key: table, Step: 1}, Tensors: []wire.Tensor{ids2, wire.F32Tensor(make([]float32, 2*testDim), 2, testDim)}}},
		{"block gradient short", "gradient floats", wire.Message{Type: wire.MsgPushDense, Meta: wire.Meta{Job: job, Key: block, Step: 1, Batch: 2}, Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, testLen-1), testLen-1)}}},
		{"dense push to a table", "not a block", wire.Message{Type: wire.MsgPushDense, Meta: push, Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, testLen), testLen)}}},
		{"step zero", "step 0", wire.Message{Type: wire.MsgPushDense, Meta: wire.Meta{Job: job, Key: block, Batch: 2}, Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, testLen), testLen)}}},
		{"huge replica", "out of range", wire.Message{Type: wire.MsgPushDense, Meta: wire.Meta{Job: job, Key: block, Step: 1, Batch: 2, Replica: 1 << 40}, Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, testLen), testLen)}}},
		{"block part past its optimiser's", "state buffer", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: block, Micro: 3}}},
		{"block part out of range", "out of range", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: block, Micro: 1 << 40}}},
		{"rows pulled with a part", "no parts", wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: table, Micro: 1}, Tensors: []wire.Tensor{ids2}}},
		{"a reply type as request", "not a request", wire.Message{Type: wire.MsgAck, Meta: wire.Meta{Job: job, Key: table}}},
	}
	for _, tc := range cases {
		reply := request(t, conn, &tc.m)
		if reply.Type != wire.MsgError || !strings.Contains(reply.Text, tc.reason) {
			t.Fatalf("%s: got %v %q, want an error saying %q", tc.name, reply.Type, reply.Text, tc.reason)
		}
		reply.Release()
	}
	if shard.Rows() != 0 {
		t.Fatalf("rejected requests created %d rows", shard.Rows())
	}
	if v, _ := shard.Version(testBlock); v != 0 {
		t.Fatalf("rejected pushes moved the block to version %d", v)
	}
	// Still serving, on the same connection.
	reply := request(t, conn, &wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: table}, Tensors: []wire.Tensor{ids2}})
	defer reply.Release()
	if reply.Type != wire.MsgPullReply || reply.Want(wire.Float32) != nil || reply.Tensors[0].Len() != 2*testDim {
		t.Fatalf("valid pull after the rejections: got %v %q", reply.Type, reply.Text)
	}
}

// A dropped connection is redialled, and a push resent after its ack was
// lost is acknowledged as a duplicate and applied once.
func TestClientRedialsAndResentPushAppliesOnce(t *testing.T) {
	checkLeaks(t)
	shard := newTestShard(t, ASP, 1, sgdMom)
	bridge, err := wiretest.NewBridge(served(t, ServiceOptions{}, shard))
	if err != nil {
		t.Fatal(err)
	}
	defer bridge.Close()
	var dials atomic.Int32
	c, err := NewClient(ClientConfig{Job: "j", Shards: 1, Timeout: 5 * time.Second, Lanes: 1,
		Dial: func(ctx context.Context, i int) (*wire.Conn, error) {
			dials.Add(1)
			return dialer(bridge.Addr())(ctx, i)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	g := randFloats(rand.New(rand.NewPCG(5, 6)), testLen)
	if err := c.PushBlock(ctx, testBlock, 1, 1, g); err != nil {
		t.Fatal(err)
	}
	bridge.Cut() // as if the ack had been lost with the connection
	if err := c.PushBlock(ctx, testBlock, 1, 1, g); err != nil {
		t.Fatalf("resent push after a cut: %v", err)
	}
	if v, _ := shard.Version(testBlock); v != 1 {
		t.Fatalf("block at version %d after one push sent twice, want 1", v)
	}
	if _, v, err := c.PullBlock(ctx, testBlock, 1); err != nil || v != 1 {
		t.Fatalf("pull after the redial: version %d, %v", v, err)
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2 (one redial after the cut)", n)
	}
}

// A BSP pull that waits for a step holds one lane; the push that completes
// the step goes on another.
func TestClientPullWaitsWhilePushGoesThrough(t *testing.T) {
	checkLeaks(t)
	c := newClient(t, served(t, ServiceOptions{}, newTestShard(t, BSP, 1, adam)), 1, 0)
	ctx := context.Background()
	pulled := make(chan error, 1)
	go func() {
		_, v, err := c.PullBlock(ctx, testBlock, 1)
		if err == nil && v != 1 {
			err = fmt.Errorf("version %d, want 1", v)
		}
		pulled <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the pull take its lane and wait
	if err := c.PushBlock(ctx, testBlock, 1, 2, make([]float32, testLen)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-pulled:
		if err != nil {
			t.Fatalf("waiting pull: %v", err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("the pull still waits after the push completed the step")
	}
}

func TestClientReportsRemoteErrors(t *testing.T) {
	checkLeaks(t)
	c := newClient(t, served(t, ServiceOptions{}, newTestShard(t, BSP, 1, adam)), 1, 0)
	err := c.PushBlock(context.Background(), testBlock, 1, 1, make([]float32, 3))
	if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "gradient floats") {
		t.Fatalf("short block push: %v, want ErrRemote saying why", err)
	}
	if _, _, err := c.Pull(context.Background(), "missing", []int64{1}, 0); !errors.Is(err, ErrRemote) {
		t.Fatalf("pull of an unknown table: %v, want ErrRemote", err)
	}
}

// Whatever a request holds, the service answers it without panicking, and
// only with a reply type the protocol allows.
func FuzzServiceRequest(f *testing.F) {
	shard := newTestShard(f, ASP, 1, adam)
	bspCfg := testConfig(f, BSP, 0, 1, 1, adam)
	bspCfg.Job = "bsp" // a BSP job beside it: assignments need one
	bsp, err := NewShard(bspCfg)
	if err != nil {
		f.Fatal(err)
	}
	svc, err := NewService(ServiceOptions{MaxIDs: 64, Logger: quiet}, shard, bsp)
	if err != nil {
		f.Fatal(err)
	}
	job, table, block := JobKey("j"), ParamKey(testTable), ParamKey(testBlock)
	seeds := []wire.Message{
		{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: table}, Tensors: []wire.Tensor{wire.I64Tensor([]int64{1, 2}, 2)}},
		{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: block}},
		{Type: wire.MsgPushSparse, Meta: wire.Meta{Job: job, Key: table, Step: 1, Batch: 1},
			Tensors: []wire.Tensor{wire.I64Tensor([]int64{3}, 1), wire.F32Tensor(make([]float32, testDim), 1, testDim)}},
		{Type: wire.MsgPushDense, Meta: wire.Meta{Job: job, Key: block, Step: 1, Batch: 1},
			Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, testLen), testLen)}},
		{Type: wire.MsgPull, Meta: wire.Meta{Job: job, Key: block, Micro: 2}},
		{Type: MsgAssignBlock, Meta: wire.Meta{Job: JobKey("bsp"), Key: block, Step: 3, Batch: 1, Micro: 1},
			Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, testLen), testLen)}},
	}
	for _, m := range seeds {
		p, err := wire.AppendMessage(nil, &m, 1<<20)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(m.Type), p)
	}
	f.Fuzz(func(t *testing.T, typ uint8, payload []byte) {
		req, err := wire.DecodeMessage(wire.MsgType(typ), payload, 1<<20)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		reply, sent := svc.handle(ctx, 0, req)
		if sent != nil {
			sent()
		}
		switch reply.Type {
		case wire.MsgPullReply, wire.MsgAck, wire.MsgError:
		default:
			t.Fatalf("reply type %v", reply.Type)
		}
	})
}

// TestServiceBlockPullsRecycleTheirReplyBuffer: the service answers a dense
// block's pull from a buffer it takes back once the reply is written, so
// pulling a 1 MiB block step after step allocates less than half of it,
// and each answer still holds the block as of its own version.
func TestServiceBlockPullsRecycleTheirReplyBuffer(t *testing.T) {
	const n = 1 << 18 // floats: 1 MiB
	shard := bigBlockShard(t, 1, n)
	svc, err := NewService(ServiceOptions{Logger: quiet}, shard)
	if err != nil {
		t.Fatal(err)
	}
	pull := func(after int64) []float32 {
		reply, sent := handleEncoded(t, svc, &wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: JobKey("j"), Key: ParamKey(testBlock), Step: uint64(after)}})
		if reply.Type != wire.MsgPullReply {
			t.Fatalf("reply %v: %s", reply.Type, reply.Text)
		}
		got := slices.Clone(reply.Tensors[0].F32)
		if sent != nil {
			sent()
		}
		return got
	}
	g := make([]float32, n)
	for step := int64(1); step <= 3; step++ {
		for i := range g {
			g[i] = float32(step)
		}
		if _, err := shard.PushBlock(id(0, step), testBlock, 1, g); err != nil {
			t.Fatal(err)
		}
		want, _, err := shard.PullBlock(context.Background(), testBlock, step)
		if err != nil {
			t.Fatal(err)
		}
		if got := pull(step); !bitsEqual(got, want) {
			t.Fatalf("step %d: the service's answer differs from the block", step)
		}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// Enough pulls that the race detector's random drops (below) stay near
	// their mean: with 20, half of them dropped now and then (1-2 % of runs).
	const pulls = 200
	for range pulls {
		m := &wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: JobKey("j"), Key: ParamKey(testBlock), Step: 3}}
		if _, sent := handleEncoded(t, svc, m); sent != nil {
			sent()
		}
	}
	runtime.ReadMemStats(&after)
	// Half the block: the race detector's sync.Pool drops a quarter of
	// what it is given on purpose.
	if per := (after.TotalAlloc - before.TotalAlloc) / pulls; per > n*4/2 {
		t.Fatalf("a pull of a %d-byte block allocates %d bytes", n*4, per)
	}
}

// PullInto writes each id's row where at says — in process straight from
// the table, over the wire from the reply — the rows Pull returns, and
// leaves the other rows of the destination alone; a destination that does
// not fit is refused before anything is written.
func TestPullIntoScattersWhatPullReturns(t *testing.T) {
	checkLeaks(t)
	clients := map[string]*Client{"wire": newClient(t, served(t, ServiceOptions{}, oneShard(t)...), 1, 0),
		"local": localClient(t, oneShard(t)[0])}
	ids, at := []int64{7, 3, 100, 12}, []int64{4, 0, 2, 5}
	const sentinel = -7
	for name, c := range clients {
		ctx := context.Background()
		want, _, err := c.Pull(ctx, testTable, ids, 0)
		if err != nil {
			t.Fatal(err)
		}
		dst := slices.Repeat([]float32{sentinel}, 6*testDim)
		if _, err := c.PullInto(ctx, testTable, ids, 0, dst, testDim, at); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for j, r := range at {
			if got := dst[r*testDim : (r+1)*testDim]; !bitsEqual(got, want[j*testDim:(j+1)*testDim]) {
				t.Errorf("%s: row %d (id %d) = %v, want %v", name, r, ids[j], got, want[j*testDim:(j+1)*testDim])
			}
		}
		for _, r := range []int{1, 3} {
			if got := dst[r*testDim : (r+1)*testDim]; slices.ContainsFunc(got, func(x float32) bool { return x != sentinel }) {
				t.Errorf("%s: row %d, named by no id, became %v", name, r, got)
			}
		}
		contiguous := make([]float32, len(want))
		if _, err := c.PullInto(ctx, testTable, ids, 0, contiguous, testDim, nil); err != nil || !bitsEqual(contiguous, want) {
			t.Errorf("%s: at nil: %v, %v, want %v", name, err, contiguous, want)
		}
		for _, bad := range []struct {
			dst  []float32
			dim  int
			at   []int64
			says string
		}{
			{make([]float32, 6*testDim), testDim, []int64{4, 0, 6, 5}, "destination row 6 of 6"},
			{make([]float32, 6*testDim), testDim, []int64{4, 0}, "2 destination rows for 4 ids"},
			{make([]float32, 3*testDim), testDim, nil, "floats for 4 rows"},
			{make([]float32, 6*(testDim+1)), testDim + 1, at, "rows of"},
		} {
			before := slices.Clone(bad.dst)
			_, err := c.PullInto(ctx, testTable, ids, 0, bad.dst, bad.dim, bad.at)
			if err == nil || !strings.Contains(err.Error(), bad.says) {
				t.Errorf("%s: dim %d, at %v, %d floats: %v, want an error saying %q", name, bad.dim, bad.at, len(bad.dst), err, bad.says)
			}
			if !bitsEqual(bad.dst, before) {
				t.Errorf("%s: a refused pull wrote into its destination", name)
			}
		}
	}
}

// TestServiceRowPullsRecycleTheirReplyBuffer: the service answers a pull
// of rows from a buffer it takes back once the reply is written, and each
// answer still holds the rows the shard holds.
func TestServiceRowPullsRecycleTheirReplyBuffer(t *testing.T) {
	shard := oneShard(t)[0]
	svc, err := NewService(ServiceOptions{Logger: quiet}, shard)
	if err != nil {
		t.Fatal(err)
	}
	ids := idsOn(0, 1, 2000)
	want := pullRows(t, shard, ids, 0)
	const pulls = 50
	reused := 0
	var last *float32
	for range pulls {
		reply, sent := handleEncoded(t, svc, &wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: JobKey("j"), Key: ParamKey(testTable)},
			Tensors: []wire.Tensor{wire.I64Tensor(ids, len(ids))}})
		if reply.Type != wire.MsgPullReply {
			t.Fatalf("reply %v: %s", reply.Type, reply.Text)
		}
		got := reply.Tensors[0].F32
		if !bitsEqual(got, want) {
			t.Fatal("the service's answer differs from the shard's rows")
		}
		if &got[0] == last {
			reused++
		}
		last = &got[0]
		if sent == nil {
			t.Fatal("a pull of rows leaves nothing to recycle")
		}
		sent()
	}
	// The race detector's sync.Pool drops a quarter of what it is given.
	if reused < pulls/2 {
		t.Fatalf("%d of %d pulls answered from the buffer the one before returned", reused, pulls)
	}
}

// handleEncoded encodes m as a client does, decodes it as the service's
// stream does, and has svc answer it.
func handleEncoded(t testing.TB, svc *Service, m *wire.Message) (*wire.Message, func()) {
	t.Helper()
	p, err := wire.AppendMessage(nil, m, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	req, err := wire.DecodeMessage(m.Type, p, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return svc.handle(context.Background(), 0, req)
}

// A pull's ids are read in place in the received frame where the host can
// (a pull is done with them before its frame is released); other
// requests' ids, which a shard may keep, are copies.
func TestPullIDsStayInTheFrame(t *testing.T) {
	svc, err := NewService(ServiceOptions{Logger: quiet}, oneShard(t)...)
	if err != nil {
		t.Fatal(err)
	}
	m := &wire.Message{Type: wire.MsgPull, Meta: wire.Meta{Job: JobKey("j"), Key: ParamKey(testTable)},
		Tensors: []wire.Tensor{wire.I64Tensor([]int64{4, 8, 15, 16, 23, 42}, 6)}}
	p, err := wire.AppendMessage(nil, m, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// The frame as the connection hands it over: in a buffer of its own,
	// which a stream's receive aligns.
	frame := make([]int64, (len(p)+7)/8)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(frame))), len(p))
	copy(buf, p)
	req, err := wire.DecodeMessage(m.Type, buf, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	view, inPlace := req.Tensors[0].Int64View()
	inFrame, err := svc.idsInFrame(req, 1)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := svc.ids(req, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inFrame, copied) || !slices.Equal(copied, []int64{4, 8, 15, 16, 23, 42}) {
		t.Fatalf("ids %v in the frame, %v copied", inFrame, copied)
	}
	if !inPlace {
		if runtime.GOARCH == "amd64" {
			t.Error("the ids of a frame in an aligned buffer are not readable in place on amd64")
		}
		return
	}
	if &inFrame[0] != &view[0] {
		t.Error("a pull's ids were copied out of a frame this host reads in place")
	}
	if &copied[0] == &view[0] {
		t.Error("ids a shard may keep alias the frame")
	}
}

// TestAwaitReadyWaitsUntilEveryShardAnswers: a client whose shard's
// service is not up yet (its dial refused, as while a node restores a
// checkpoint) asks again until it answers, saying so each time, however
// long past the client's request timeout; a context that ends stops the
// wait with its error.
func TestAwaitReadyWaitsUntilEveryShardAnswers(t *testing.T) {
	shards := twoShards(t, 1)
	addr := served(t, ServiceOptions{}, shards...)
	var up atomic.Bool
	c, err := NewClient(ClientConfig{Job: "j", Shards: 2, Timeout: 50 * time.Millisecond,
		Dial: func(ctx context.Context, i int) (*wire.Conn, error) {
			if !up.Load() {
				return nil, errors.New("connection refused")
			}
			return dialer(addr)(ctx, i)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var asked atomic.Int64
	done := make(chan error, 1)
	go func() { done <- c.AwaitReady(context.Background(), func(int, error) { asked.Add(1) }) }()
	time.Sleep(300 * time.Millisecond) // six request timeouts
	select {
	case err := <-done:
		t.Fatalf("ready before the service is up: %v", err)
	default:
	}
	if asked.Load() < 2 {
		t.Errorf("asked %d times in 300 ms", asked.Load())
	}
	up.Store(true)
	if err := <-done; err != nil {
		t.Fatalf("once the service is up: %v", err)
	}
	up.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c2, err := NewClient(ClientConfig{Job: "j", Shards: 2, Timeout: time.Second,
		Dial: func(context.Context, int) (*wire.Conn, error) { return nil, errors.New("connection refused") }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	if err := c2.AwaitReady(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a wait whose context ends: %v", err)
	}
}
