package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/heterps/heterps/native"
)

// embeddingBag times the embedding-bag forward over a 1M-row table for 26
// slots of one id each and batch 512 at several widths, and its backward
// (merging duplicate ids), against memcpy of the gathered bytes.
func embeddingBag() {
	const rows, batch, slots = 1 << 20, 512, 26
	rng := rand.New(rand.NewPCG(5, 6))
	fmt.Fprintf(output, "Embedding bag, %d-row table, batch %d x %d slots (1 id per bag, Zipf-skewed ids), sum pooling\n", rows, batch, slots)
	w := table()
	fmt.Fprintln(w, "dim\tISA\tfwd us\tfwd Mrows/s\tfwd GB/s\tbwd us\tmemcpy GB/s\t")
	zipf := rand.NewZipf(rng, 1.1, 1, rows-1)
	ids := make([]int64, batch*slots)
	offsets := make([]int64, batch*slots+1)
	for i := range ids {
		ids[i] = int64(zipf.Uint64())
		offsets[i+1] = int64(i + 1)
	}
	for _, dim := range []int{9, 16, 32, 64} {
		table := randBuf(rng, rows*dim, -0.05, 0.05)
		out := make(native.HostBuffer, batch*slots*dim)
		dout := randBuf(rng, batch*slots*dim, -1, 1)
		src := make(native.HostBuffer, batch*slots*dim)
		for _, isa := range native.SupportedISAs() {
			b := backend(isa)
			fwd := measure(func() { must(b.EmbeddingBag(native.PoolSum, table, rows, dim, offsets, ids, out)) })
			bwd := measure(func() {
				_, err := b.EmbeddingBagBackward(native.PoolSum, dim, offsets, ids, dout)
				must(err)
			})
			cp := measure(func() { must(b.Copy(out, src)) })
			bytes := float64(len(ids)*dim*4*2 + len(ids)*8)
			fmt.Fprintf(w, "%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", dim, isa, fwd*1e6,
				float64(len(ids))/fwd/1e6, bytes/fwd/1e9, bwd*1e6, float64(len(out)*8)/cp/1e9)
		}
	}
	w.Flush()
	fmt.Fprintln(output)
}
