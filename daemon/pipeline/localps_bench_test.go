package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// BenchmarkLocalPS is the shape of `make run`'s job: ctrdnn, one stage of
// one replica whose one BSP shard lives in the same process (the client's
// Local fast path), batch 512, beside nn.Trainer on the same backend and
// batches, at 1 and 2 threads. Profile it with -cpuprofile to see what
// the stage spends that the single process does not.
func BenchmarkLocalPS(b *testing.B) {
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		b.Fatal(err)
	}
	for _, threads := range []int{1, 2} {
		backend, err := native.NewCPU(native.CPUOptions{Threads: threads})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) { benchLocalPS(b, cfg, backend) })
	}
}

func benchLocalPS(b *testing.B, cfg *config.Model, backend native.Backend) {
	const size = 512
	next := func(b *testing.B) func(context.Context, int64) (*data.Batch, error) {
		src := openSynthetic(b, cfg)
		return func(ctx context.Context, _ int64) (*data.Batch, error) { return src.Next(ctx, size) }
	}
	b.Run("single-process", func(b *testing.B) {
		tr, err := nn.NewTrainer(backend, cfg, testSeed, 0)
		if err != nil {
			b.Fatal(err)
		}
		batches := next(b)
		for b.Loop() {
			batch, err := batches(context.Background(), 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tr.Step(batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size*b.N)/b.Elapsed().Seconds(), "samples/s")
	})
	// dense_sync = "ps" (the dense blocks through the shard) and
	// "allreduce" (a ring of one: the optimiser runs in the stage), as
	// make run's job plans it.
	for _, sync := range []string{"ps", "allreduce"} {
		b.Run("local-"+sync, func(b *testing.B) {
			var configure []func(*Config)
			if sync == "allreduce" {
				configure = append(configure, soleAllreduce)
			}
			w := localPSWorker(b, cfg, backend, 0, next(b), configure...)
			benchWorkerSteps(b, w, size)
		})
	}
}

// benchWorkerSteps times w's steps after a first (rows created, prefetch
// started), reporting samples/s and each phase's microseconds a step.
func benchWorkerSteps(b *testing.B, w *Worker, size int) {
	ctx := context.Background()
	if _, err := w.Step(ctx, 1); err != nil {
		b.Fatal(err)
	}
	var spent Result
	b.ResetTimer()
	for i := range b.N {
		res, err := w.Step(ctx, int64(i)+2)
		if err != nil {
			b.Fatal(err)
		}
		spent.Input += res.Input
		spent.Pull += res.Pull
		spent.Compute += res.Compute
		spent.Push += res.Push
	}
	b.ReportMetric(float64(size*b.N)/b.Elapsed().Seconds(), "samples/s")
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"input", spent.Input}, {"pull", spent.Pull}, {"compute", spent.Compute}, {"push", spent.Push}} {
		b.ReportMetric(float64(d.v.Microseconds())/float64(b.N), d.name+"-us/step")
	}
}

// openSynthetic opens the training split of synthetic:1 for cfg's
// vocabulary, closed when b ends.
func openSynthetic(b *testing.B, cfg *config.Model) data.Source {
	src, err := data.Open("synthetic:1", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { src.Close() })
	return src
}

// soleAllreduce makes a localPSWorker's stage keep its dense parameters
// by allreduce, a ring of itself alone, as make run's job plans it.
func soleAllreduce(c *Config) {
	c.Allreduce = &Allreduce{Peers: []string{"replica-0"}, TotalSteps: 1 << 20}
}

// localPSWorker is a one-stage worker of cfg for a job of steps steps (0:
// no end), the stage's sole replica, whose one BSP shard it reaches
// through the client's Local fast path; configure, if given, finishes its
// Config.
func localPSWorker(t testing.TB, cfg *config.Model, backend native.Backend, steps int64, batches func(context.Context, int64) (*data.Batch, error),
	configure ...func(*Config)) *Worker {
	t.Helper()
	declared, err := DeclareModel(native.MustCPU(), cfg, testSeed)
	if err != nil {
		t.Fatal(err)
	}
	stages := []Range{{0, declared.NumLayers() - 1}}
	tables, blocks, err := PSParams(declared, stages, steps)
	if err != nil {
		t.Fatal(err)
	}
	cfgs := ShardConfigs(ShardSpec{Job: testJob, Model: cfg.Name, Shards: 1, Mode: ps.BSP, Replicas: []int{1},
		Backend: native.MustCPU()}, tables, blocks)
	shard, err := ps.NewShard(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shard.Close() })
	client, err := ps.NewClient(ps.ClientConfig{Job: testJob, Shards: 1, Local: func(int) *ps.Shard { localShardCalled(); return shard },
		Dial: func(context.Context, int) (*wire.Conn, error) { return nil, errors.New("the shard is local") }})
	if err != nil {
		t.Fatal(err)
	}
	model, err := BuildStageModel(backend, cfg, testSeed, stages[0])
	if err != nil {
		t.Fatal(err)
	}
	wc := Config{Job: testJob, Stages: 1, Layers: stages[0], Model: model, Backend: backend, PS: client,
		Mode: ps.BSP, Batches: batches, LastStep: steps, SoleReplica: true}
	for _, f := range configure {
		f(&wc)
	}
	w, err := NewWorker(wc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// BenchmarkLocalPSAlternating holds make run's stage (ctrdnn, one replica,
// its shard in-process, dense_sync allreduce) against nn.Trainer on the
// same 2-thread backend, each with its batches read ahead as heterps train
// and the daemon read them, in alternating chunks of 25 steps (one chunk
// of each per iteration), so that a slow spell of a shared host falls on
// both: BenchmarkLocalPS runs them minutes apart. It reports each side's
// samples/s and the median over iterations of the stage's over the
// trainer's, unpinned and pinned (the steps' thread and the kernels'
// helpers each on a CPU of their own, as heterps train runs; needs 2 CPUs).
func BenchmarkLocalPSAlternating(b *testing.B) {
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		b.Fatal(err)
	}
	for _, pin := range []native.Pinning{native.PinNever, native.PinAlways} {
		b.Run("pin="+pin.String(), func(b *testing.B) {
			backend, err := native.NewCPU(native.CPUOptions{Threads: 2, Pin: pin})
			if err != nil {
				b.Skip(err) // PinAlways on a machine of one CPU
			}
			defer backend.PinCaller()()
			benchAlternating(b, cfg, backend)
		})
	}
}

func benchAlternating(b *testing.B, cfg *config.Model, backend native.Backend) {
	const size, chunk = 512, 25
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readAhead := func() func(context.Context) (*data.Batch, error) {
		p, err := data.PrefetchBatches(ctx, openSynthetic(b, cfg), size, 2, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
		return p.Next
	}
	trainerBatches := readAhead()
	tr, err := nn.NewTrainer(backend, cfg, testSeed, 0)
	if err != nil {
		b.Fatal(err)
	}
	stageBatches := readAhead()
	w := localPSWorker(b, cfg, backend, 0, func(ctx context.Context, _ int64) (*data.Batch, error) { return stageBatches(ctx) },
		soleAllreduce)
	step := int64(1)
	if _, err := w.Step(ctx, step); err != nil { // rows created, prefetch started
		b.Fatal(err)
	}
	var trainerTime, stageTime time.Duration
	ratios := make([]float64, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		for range chunk {
			batch, err := trainerBatches(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tr.Step(batch); err != nil {
				b.Fatal(err)
			}
		}
		mid := time.Now()
		for range chunk {
			step++
			if _, err := w.Step(ctx, step); err != nil {
				b.Fatal(err)
			}
		}
		t, s := mid.Sub(start), time.Since(mid)
		trainerTime, stageTime = trainerTime+t, stageTime+s
		ratios = append(ratios, t.Seconds()/s.Seconds())
	}
	samples := float64(size * chunk * b.N)
	b.ReportMetric(samples/trainerTime.Seconds(), "trainer-samples/s")
	b.ReportMetric(samples/stageTime.Seconds(), "stage-samples/s")
	slices.Sort(ratios)
	n := len(ratios)
	b.ReportMetric((ratios[(n-1)/2]+ratios[n/2])/2, "stage/trainer")
}
