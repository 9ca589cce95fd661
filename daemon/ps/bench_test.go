package ps

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/heterps/heterps/native"
)

// BenchmarkPushPull measures one BSP step of one replica on one shard —
// pull a batch's rows, push their gradient, one Adam update — beside the
// single-process equivalent (gather the rows from a flat table, UpdateRows)
// in the same run. Batches hold distinct ids out of 2^20, drawn with a skew
// towards small ids as click logs are: 4096 rows of 64 floats, and
// ctrdnn's shape, about 13k rows of 9 floats (512 samples x 26 slots).
func BenchmarkPushPull(b *testing.B) {
	for _, shape := range []struct{ dim, batch int }{{64, 4096}, {9, 13000}} {
		b.Run(fmt.Sprintf("dim%d-rows%d", shape.dim, shape.batch), func(b *testing.B) {
			benchPushPull(b, shape.dim, shape.batch)
		})
	}
}

func benchPushPull(b *testing.B, dim, batch int) {
	const vocab = 1 << 20
	batches := benchBatches(batch, vocab, 32)
	grad := randFloats(rand.New(rand.NewPCG(1, 2)), batch*dim)
	o := OptimConfig{Hyper: native.Optim{Kind: native.Adam, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, LR: 0.001}

	b.Run("ps", func(b *testing.B) {
		cfg := Config{Job: "bench", Shards: 1, Replicas: map[int]int{0: 1}, Backend: testBackend(b),
			Tables: []TableSpec{{Name: "t", Dim: dim, Optim: o, InitSeed: 1, InitLimit: 0.01}}}
		s, err := NewShard(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		step := int64(0)
		b.ReportAllocs()
		for b.Loop() {
			ids := batches[step%int64(len(batches))]
			if _, _, err := s.PullRows(ctx, "t", ids, step); err != nil {
				b.Fatal(err)
			}
			step++
			if _, err := s.PushRows(PushID{Job: "bench", Step: step}, "t", float64(batch), ids, grad); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
	})

	b.Run("single-process", func(b *testing.B) {
		be := testBackend(b)
		table := make([]float32, vocab*dim)
		state := []native.Buffer{be.Alloc(len(table)), be.Alloc(len(table))}
		rows := make([]float32, batch*dim)
		step := int64(0)
		b.ReportAllocs()
		for b.Loop() {
			ids := batches[step%int64(len(batches))]
			for i, id := range ids {
				copy(rows[i*dim:(i+1)*dim], table[int(id)*dim:(int(id)+1)*dim])
			}
			step++
			if err := be.UpdateRows(o.At(step), native.HostBuffer(table), vocab, dim, ids,
				native.HostBuffer(grad), state...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
	})
}

// benchBatches draws n batches of distinct ids below vocab, skewed to
// small ids (the square of a uniform draw).
func benchBatches(size, vocab, n int) [][]int64 {
	rng := rand.New(rand.NewPCG(3, 4))
	out := make([][]int64, n)
	for k := range out {
		seen := make(map[int64]bool, size)
		for len(seen) < size {
			u := rng.Float64()
			seen[int64(u*u*float64(vocab))] = true
		}
		for id := range seen {
			out[k] = append(out[k], id)
		}
		slices.Sort(out[k])
	}
	return out
}
