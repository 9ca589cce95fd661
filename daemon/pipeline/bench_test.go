package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/native"
)

// BenchmarkCTRDNN trains ctrdnn on synthetic data single-process and as two
// pipeline stages (embedding+concat, then the FC layers) over loopback
// with two BSP parameter-server shards, and reports samples/s of each.
func BenchmarkCTRDNN(b *testing.B) {
	const size = 256
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		b.Fatal(err)
	}
	batches := func(int) func(context.Context, int64) (*data.Batch, error) {
		src, err := data.Open("synthetic:1", data.Options{Vocab: cfg.Input.Vocab})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { src.Close() })
		return func(ctx context.Context, _ int64) (*data.Batch, error) { return src.Next(ctx, size) }
	}
	b.Run("single-process", func(b *testing.B) {
		tr, err := nn.NewTrainer(native.MustCPU(), cfg, testSeed, 0)
		if err != nil {
			b.Fatal(err)
		}
		next := batches(0)
		b.ResetTimer()
		for b.Loop() {
			batch, err := next(context.Background(), 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tr.Step(batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size*b.N)/b.Elapsed().Seconds(), "samples/s")
	})
	for _, micro := range []int{1, 4} {
		b.Run(fmt.Sprintf("two-stages/micro=%d", micro), func(b *testing.B) {
			j := newJob(b, cfg, []Range{{0, 1}, {2, 6}}, []int{1, 1}, 0, ps.BSP)
			j.micro = micro
			ws := j.workers(batches)
			j.train(ws, 1, 1) // connections up, rows created
			b.ResetTimer()
			j.train(ws, 2, int64(b.N)+1)
			b.ReportMetric(float64(size*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}
