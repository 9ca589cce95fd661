package pipeline

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// BenchmarkDenseSync times one step's synchronisation of a dense block of
// n floats among R replicas over loopback: through one BSP
// parameter-server shard (every replica pushes its gradient and pulls the
// new value, the shard averaging and applying SGD once), or by the ring
// allreduce with each replica applying SGD itself. It reports the mean
// step in ms; coord.AllreduceMinBytes comes from where the two cross.
//
//	go test -run '^$' -bench DenseSync -benchtime 20x ./daemon/pipeline
func BenchmarkDenseSync(b *testing.B) {
	for _, reps := range []int{2, 4, 8} {
		for _, n := range []int{1 << 14, 1 << 16, 1 << 17, 1 << 18, 1 << 20} {
			b.Run(fmt.Sprintf("ps/R=%d/bytes=%d", reps, 4*n), func(b *testing.B) { benchPSSync(b, reps, n) })
			b.Run(fmt.Sprintf("allreduce/R=%d/bytes=%d", reps, 4*n), func(b *testing.B) { benchRingSync(b, reps, n) })
			if halving(reps, n) {
				b.Run(fmt.Sprintf("allreduce-ring/R=%d/bytes=%d", reps, 4*n), func(b *testing.B) {
					halvingOn = false
					defer func() { halvingOn = true }()
					benchRingSync(b, reps, n)
				})
			}
		}
	}
}

var benchSGD = ps.OptimConfig{Hyper: native.Optim{Kind: native.SGD}, LR: 0.01}

// eachReplica runs f(r) for every replica at once and fails b on errors.
func eachReplica(b *testing.B, reps int, f func(r int) error) {
	errs := make([]error, reps)
	var wg sync.WaitGroup
	for r := range reps {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchPSSync(b *testing.B, reps, n int) {
	shard, err := ps.NewShard(ps.Config{Job: testJob, Model: "bench", Shard: 0, Shards: 1, Mode: ps.BSP,
		Replicas: map[int]int{0: reps}, Blocks: []ps.BlockSpec{{Name: "w", Init: make([]float32, n), Optim: benchSGD}},
		WaitTimeout: 20 * time.Second, Backend: native.MustCPU()})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := ps.NewService(ps.ServiceOptions{Logger: quiet}, shard)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := wire.Listen("127.0.0.1:0", wireConfig("ps"))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { svc.Serve(ctx, ln) })
	defer func() { cancel(); wg.Wait(); ln.Close() }()
	clients := make([]*ps.Client, reps)
	for r := range reps {
		clients[r], err = ps.NewClient(ps.ClientConfig{Job: testJob, Stage: 0, Replica: r, Shards: 1, Timeout: 20 * time.Second,
			Dial: func(ctx context.Context, _ int) (*wire.Conn, error) {
				return wire.Dial(ctx, ln.Addr().String(), wireConfig(fmt.Sprintf("r%d", r)), "ps")
			}})
		if err != nil {
			b.Fatal(err)
		}
		defer clients[r].Close()
	}
	grads := benchGrads(reps, n)
	step := int64(0)
	sync := func() {
		step++
		eachReplica(b, reps, func(r int) error {
			if err := clients[r].PushBlock(ctx, "w", step, 1, grads[r]); err != nil {
				return err
			}
			_, _, err := clients[r].PullBlock(ctx, "w", step)
			return err
		})
	}
	sync() // connections up
	b.ResetTimer()
	for b.Loop() {
		sync()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/step")
}

func benchRingSync(b *testing.B, reps, n int) {
	trs, names := ringTransports(b, reps)
	be := native.MustCPU()
	grads := benchGrads(reps, n)
	values := benchGrads(reps, n)
	step := int64(0)
	sync := func() {
		step++
		eachReplica(b, reps, func(r int) error {
			rg, err := newRing(&Allreduce{Transport: trs[r], Peers: names}, 1, 0, step, iotaInts(reps), r)
			if err != nil {
				return err
			}
			g := append([]float32(nil), grads[r]...)
			if err := rg.reduce(context.Background(), 0, g, 1, nil); err != nil {
				return err
			}
			return be.Update(benchSGD.At(step), native.HostBuffer(values[r]), native.HostBuffer(g))
		})
	}
	sync()
	b.ResetTimer()
	for b.Loop() {
		sync()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/step")
}

func benchGrads(reps, n int) [][]float32 {
	out := make([][]float32, reps)
	for r := range out {
		out[r] = make([]float32, n)
		for i := range out[r] {
			out[r][i] = float32(i%7) * 0.001
		}
	}
	return out
}
