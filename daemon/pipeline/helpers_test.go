package pipeline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
	"go.uber.org/goleak"
)

const (
	testJob   = "job1"
	testSeed  = 7
	testVocab = 40
	testSlots = 4
	testDense = 3
	psShards  = 2
)

// ctrModel: two embedding layers over slot ranges, concat, three FC layers
// (6 layers). The optimisers are filled in per test.
const ctrModel = `
version = 1
name = "pipe"
task = "ctr"
[input]
dense = 3
slots = 4
vocab = 40
[init]
embedding_scale = 0.5
[[layer]]
kind = "embedding"
dim = 3
slots = [0, 2]
pool = "mean"
[[layer]]
kind = "embedding"
dim = 2
slots = [2, 4]
[[layer]]
kind = "concat"
[[layer]]
kind = "fc"
out = 6
act = "tanh"
[[layer]]
kind = "fc"
out = 5
act = "relu"
[[layer]]
kind = "fc"
out = 1
[loss]
kind = "bce"
%s
`

const adamAdagrad = `
[optimizer]
kind = "adam"
lr = 0.02
[sparse_optimizer]
kind = "adagrad"
lr = 0.1
eps = 1e-6
`

const sgdMomentum = `
[optimizer]
kind = "sgd"
lr = 0.1
momentum = 0.9
`

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func checkLeaks(t testing.TB) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

func modelConfig(t testing.TB, optim string) *config.Model {
	t.Helper()
	m, err := config.ParseModel("pipe.toml", fmt.Appendf(nil, ctrModel, optim))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func buildModel(t testing.TB, cfg *config.Model) *nn.Model {
	t.Helper()
	m, err := nn.Build(native.MustCPU(), cfg, testSeed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func buildStageModel(t testing.TB, cfg *config.Model, r Range) *nn.Model {
	t.Helper()
	m, err := BuildStageModel(native.MustCPU(), cfg, testSeed, r)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testBatch is batch number i of a stream: n samples of 1..3 ids per slot
// (repeats included), dense features and 0/1 labels.
func testBatch(stream, i uint64, n int) *data.Batch {
	rng := rand.New(rand.NewPCG(stream, i))
	b := &data.Batch{Size: n, Slots: testSlots, NumDense: testDense, Offsets: []int64{0}}
	for range n {
		for range testSlots {
			for range 1 + rng.IntN(3) {
				b.IDs = append(b.IDs, rng.Int64N(testVocab))
			}
			b.Offsets = append(b.Offsets, int64(len(b.IDs)))
		}
		for range testDense {
			b.Dense = append(b.Dense, rng.Float32()*2-1)
		}
		b.Labels = append(b.Labels, float32(rng.IntN(2)))
	}
	return b
}

// job is an in-process distributed job: parameter-server shards behind a
// loopback service, and one wire transport per worker.
type job struct {
	t        testing.TB
	cfg      *config.Model
	stages   []Range
	replicas []int
	steps    int64
	mode     ps.Mode
	micro    int // micro-batches per step
	lastStep int // Config.LastStep of every worker
	psAddr   string
	shards   []*ps.Shard
	// shares, if set, gives each stage's workers their Share.
	shares []Share
	// rows[stage][replica] is the rows each worker's last step processed.
	rows [][]int
	// schedule is every worker's Config.Schedule, unless schedules names
	// the stage's.
	schedule  Schedule
	schedules []Schedule
	// lookahead is every worker's Config.Lookahead.
	lookahead int
	// wrap, if set, wraps each worker's transport for its links.
	wrap func(stage int, t wire.Transport) wire.Transport
	// peak[stage][replica] is the largest Result.PeakLive of its steps.
	peak [][]int
	// tuneWire, if set, changes the workers' transports' wire config.
	tuneWire func(*wire.Config)
	// configure, if set, finishes each worker's Config before NewWorker.
	configure func(cfg *Config, trs map[string]*wire.TCPTransport)
}

func newJob(t testing.TB, cfg *config.Model, stages []Range, replicas []int, steps int64, mode ps.Mode) *job {
	t.Helper()
	return newJobFrom(t, cfg, stages, replicas, steps, mode, nil, "")
}

// newJobFrom is newJob whose stages marked in allreduce keep their dense
// blocks under their MirrorStage, and whose shards, if restoreDir is set,
// are restored from that checkpoint.
func newJobFrom(t testing.TB, cfg *config.Model, stages []Range, replicas []int, steps int64, mode ps.Mode,
	allreduce []bool, restoreDir string) *job {
	t.Helper()
	j := &job{t: t, cfg: cfg, stages: stages, replicas: replicas, steps: steps, mode: mode}
	declared, err := DeclareModel(native.MustCPU(), cfg, testSeed)
	if err != nil {
		t.Fatal(err)
	}
	tables, blocks, err := PSParams(declared, stages, steps)
	if err != nil {
		t.Fatal(err)
	}
	MirrorBlocks(blocks, len(stages), allreduce)
	spec := ShardSpec{Job: testJob, Model: cfg.Name, Shards: psShards, Mode: mode, Replicas: replicas, Allreduce: allreduce,
		WaitTimeout: 20 * time.Second, Backend: native.MustCPU()}
	cfgs := ShardConfigs(spec, tables, blocks)
	var shards []*ps.Shard
	if restoreDir != "" {
		if shards, err = ps.RestoreAll(cfgs, restoreDir); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cfgs[len(shards):] {
		s, err := ps.NewShard(c)
		if err != nil {
			t.Fatal(err)
		}
		shards = append(shards, s)
	}
	j.shards = shards
	svc, err := ps.NewService(ps.ServiceOptions{Logger: quiet}, shards...)
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
		svc.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		ln.Close()
	})
	j.psAddr = ln.Addr().String()
	return j
}

func wireConfig(node string) wire.Config {
	return wire.Config{NodeID: node, Plain: true, Logger: quiet, DialTimeout: 5 * time.Second}
}

func nodeID(stage, replica int) string { return fmt.Sprintf("s%d-r%d", stage, replica) }

func (j *job) client(stage, replica int) *ps.Client {
	j.t.Helper()
	c, err := ps.NewClient(ps.ClientConfig{Job: testJob, Stage: stage, Replica: replica, Shards: psShards,
		Timeout: 20 * time.Second,
		Dial: func(ctx context.Context, _ int) (*wire.Conn, error) {
			return wire.Dial(ctx, j.psAddr, wireConfig(nodeID(stage, replica)), "ps")
		}})
	if err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(func() { c.Close() })
	return c
}

// transports starts one transport per stage replica, each knowing the
// partners it exchanges with.
func (j *job) transports() map[string]*wire.TCPTransport {
	j.t.Helper()
	out := map[string]*wire.TCPTransport{}
	for st, n := range j.replicas {
		for r := range n {
			wc := wireConfig(nodeID(st, r))
			if j.tuneWire != nil {
				j.tuneWire(&wc)
			}
			tr, err := wire.NewTCPTransport("127.0.0.1:0", wc)
			if err != nil {
				j.t.Fatal(err)
			}
			j.t.Cleanup(func() { tr.Close() })
			out[nodeID(st, r)] = tr
		}
	}
	for st := 0; st+1 < len(j.replicas); st++ {
		for up := range j.replicas[st] {
			for _, down := range Partners(up, j.replicas[st], j.replicas[st+1]) {
				// The larger id waits to be dialled: it learns of its
				// peer first, or it would turn the first dial away.
				a, b := nodeID(st, up), nodeID(st+1, down)
				if a < b {
					a, b = b, a
				}
				if err := out[a].AddPeer(b, out[b].Addr().String()); err != nil {
					j.t.Fatal(err)
				}
				if err := out[b].AddPeer(a, out[a].Addr().String()); err != nil {
					j.t.Fatal(err)
				}
			}
		}
	}
	return out
}

// worker builds the worker of (stage, replica); batches feeds stage 0.
func (j *job) worker(trs map[string]*wire.TCPTransport, stage, replica int,
	batches func(context.Context, int64) (*data.Batch, error), timeout time.Duration) *Worker {
	j.t.Helper()
	cfg := Config{Job: testJob, Stage: stage, Stages: len(j.stages), Replica: replica, Layers: j.stages[stage],
		Model: buildStageModel(j.t, j.cfg, j.stages[stage]), Backend: native.MustCPU(), PS: j.client(stage, replica), Mode: j.mode,
		MicroBatches: j.micro, LastStep: int64(j.lastStep), Schedule: j.schedule, Lookahead: j.lookahead,
		StepTimeout: timeout}
	if stage < len(j.shares) {
		cfg.Share = j.shares[stage]
	}
	if stage < len(j.schedules) {
		cfg.Schedule = j.schedules[stage]
	}
	var tr wire.Transport = trs[nodeID(stage, replica)]
	if j.wrap != nil {
		tr = j.wrap(stage, tr)
	}
	cfg.Prev, cfg.Next = PartnerLinks(tr, stage, replica, j.replicas, nodeID)
	if stage == 0 {
		cfg.Batches = batches
	}
	if j.configure != nil {
		j.configure(&cfg, trs)
	}
	w, err := NewWorker(cfg)
	if err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(func() { w.Close() })
	return w
}

// run trains every replica of every stage for j.steps steps, each in its
// own goroutine, and returns the last stage's losses per replica and step.
func (j *job) run(batches func(replica int) func(context.Context, int64) (*data.Batch, error)) [][]float64 {
	j.t.Helper()
	return j.train(j.workers(batches), 1, j.steps)
}

// workers builds every replica's worker; ws[stage][replica].
func (j *job) workers(batches func(replica int) func(context.Context, int64) (*data.Batch, error)) [][]*Worker {
	j.t.Helper()
	trs := j.transports()
	ws := make([][]*Worker, len(j.replicas))
	for st, n := range j.replicas {
		for r := range n {
			ws[st] = append(ws[st], j.worker(trs, st, r, batches(r), 30*time.Second))
		}
	}
	return ws
}

// train runs steps [first, last] on every worker at once.
func (j *job) train(ws [][]*Worker, first, last int64) [][]float64 {
	j.t.Helper()
	final := len(ws) - 1
	losses := make([][]float64, len(ws[final]))
	j.rows, j.peak = make([][]int, len(ws)), make([][]int, len(ws))
	for st := range ws {
		j.rows[st], j.peak[st] = make([]int, len(ws[st])), make([]int, len(ws[st]))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for st := range ws {
		for r, w := range ws[st] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for step := first; step <= last; step++ {
					res, err := w.Step(context.Background(), step)
					if err != nil {
						errs <- err
						return
					}
					if st == final {
						losses[r] = append(losses[r], res.Loss)
					}
					j.rows[st][r] = res.Samples
					j.peak[st][r] = max(j.peak[st][r], res.PeakLive)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		j.t.Fatal(err)
	}
	return losses
}

// maxDiff compares the servers' parameters after the job with a
// single-process model's: every dense block, and every row of every table
// (or the rows of ids, if given).
func (j *job) maxDiff(ref *nn.Model, ids ...int64) float64 {
	j.t.Helper()
	c := j.client(0, 0)
	ctx := context.Background()
	all := ids
	if all == nil {
		for i := range int64(testVocab) {
			all = append(all, i)
		}
	}
	worst := 0.0
	for _, p := range ref.Params() {
		var got []float32
		var err error
		if p.Sparse {
			got, _, err = c.Pull(ctx, p.Name, all, j.steps)
		} else {
			got, _, err = c.PullBlock(ctx, p.Name, j.steps)
		}
		if err != nil {
			j.t.Fatal(err)
		}
		want, _ := native.Host(p.Value)
		if p.Sparse {
			want = tableRows(want, p.Cols, all)
		}
		if len(got) != len(want) {
			j.t.Fatalf("%s: %d values on the servers, %d in the model", p.Name, len(got), len(want))
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

func fixedBatches(f func(step int64) *data.Batch) func(context.Context, int64) (*data.Batch, error) {
	return func(_ context.Context, step int64) (*data.Batch, error) { return f(step), nil }
}

// reference trains the model single-process on batch(step) for steps.
func reference(t testing.TB, cfg *config.Model, steps int64, batch func(step int64) *data.Batch) (*nn.Model, []float64) {
	t.Helper()
	tr, err := nn.NewTrainer(native.MustCPU(), cfg, testSeed, steps)
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for step := int64(1); step <= steps; step++ {
		loss, err := tr.Step(batch(step))
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss)
	}
	return tr.Model, losses
}

// tableRows gathers the rows of ids from a [vocab x dim] table.
func tableRows(table []float32, dim int, ids []int64) []float32 {
	out := make([]float32, 0, len(ids)*dim)
	for _, id := range ids {
		out = append(out, table[int(id)*dim:int(id+1)*dim]...)
	}
	return out
}
