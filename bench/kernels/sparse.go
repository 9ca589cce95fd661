package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/heterps/heterps/native"
)

// sparseRows times the kernels that touch a big table's rows at random —
// the embedding-bag forward and Adam's row update — with their row
// prefetching on and off (native.SetRowPrefetch) and the table on 4 KiB or
// transparent huge pages, in the same run. Each call takes the next of 64
// batches drawn ahead, so a call finds in cache only what earlier batches
// left there, as a training step does.
func sparseRows() {
	const rows, batch, slots, batches = 1 << 20, 512, 26, 64
	rng := rand.New(rand.NewPCG(7, 8))
	zipf := rand.NewZipf(rng, 1.1, 1, rows-1)
	idSets := make([][]int64, batches)
	distinct := make([][]int64, batches)
	for i := range idSets {
		idSets[i] = make([]int64, batch*slots)
		for j := range idSets[i] {
			idSets[i][j] = int64(zipf.Uint64())
		}
		distinct[i] = firstSeen(idSets[i])
	}
	total := 0
	for _, d := range distinct {
		total += len(d)
	}
	fmt.Fprintf(output, "Sparse rows of a %d-row table: %d batches of %d x %d Zipf-skewed ids in turn (%d distinct a batch on average); transparent huge pages: %s\n",
		rows, batches, batch, slots, total/batches, thpMode())
	w := table()
	fmt.Fprintln(w, "op\tdim\tpages\tISA\tno prefetch us\tprefetch us\tspeed-up\t")
	offsets := make([]int64, batch*slots+1)
	for i := range offsets {
		offsets[i] = int64(i)
	}
	isa, err := native.BestISA()
	must(err)
	b := backend(isa)
	o := native.Optim{Kind: native.Adam, LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 10}
	for _, dim := range []int{9, 64} {
		for _, huge := range []bool{false, true} {
			alloc := func(n int) native.HostBuffer {
				if huge {
					return b.Alloc(n).(native.HostBuffer)
				}
				return make(native.HostBuffer, n)
			}
			tab, m, v := alloc(rows*dim), alloc(rows*dim), alloc(rows*dim)
			copy(tab, randBuf(rng, len(tab), -0.05, 0.05))
			out := make(native.HostBuffer, batch*slots*dim)
			grad := randBuf(rng, batch*slots*dim, -0.01, 0.01)
			pages := "4 KiB"
			if huge {
				pages = "huge"
			}
			next := 0
			fwd := func() {
				next = (next + 1) % batches
				must(b.EmbeddingBag(native.PoolSum, tab, rows, dim, offsets, idSets[next], out))
			}
			update := func() {
				next = (next + 1) % batches
				ids := distinct[next]
				must(b.UpdateRows(o, tab, rows, dim, ids, grad[:len(ids)*dim], m, v))
			}
			for _, op := range []struct {
				name string
				fn   func()
			}{{"embedding-bag fwd", fwd}, {"adam rows", update}} {
				native.SetRowPrefetch(false)
				off := measure(op.fn)
				native.SetRowPrefetch(true)
				on := measure(op.fn)
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%.1f\t%.1f\t%.2fx\t\n", op.name, dim, pages, isa, off*1e6, on*1e6, off/on)
			}
		}
	}
	probeRows(w, idSets)
	w.Flush()
	fmt.Fprintln(output)
}

// probeRows times the parameter server's batched id-map probe
// (native.ProbeIDs) for the batches' ids in a map of a million ids, with
// its prefetching off and on.
func probeRows(w *tabwriter.Writer, idSets [][]int64) {
	const held, capacity = 1 << 20, 1 << 21
	keys, slots := make([]int64, capacity), make([]int32, capacity)
	for id := range int64(held) { // the Zipf ids are 0..held-1: every one is held
		i := probeCell(id, capacity-1)
		for slots[i] != 0 {
			i = (i + 1) & (capacity - 1)
		}
		keys[i], slots[i] = id, int32(id+1)
	}
	out := make([]int, len(idSets[0]))
	next := 0
	probe := func() {
		next = (next + 1) % len(idSets)
		_, err := native.ProbeIDs(keys, slots, idSets[next], out)
		must(err)
	}
	native.SetRowPrefetch(false)
	off := measure(probe)
	native.SetRowPrefetch(true)
	on := measure(probe)
	fmt.Fprintf(w, "id-map probe\t-\t%s\tnative\t%.1f\t%.1f\t%.2fx\t\n", "4 KiB", off*1e6, on*1e6, off/on)
}

// probeCell is an id's first cell in an id map of mask+1 cells, as
// native.ProbeIDs and the parameter server's map place it.
func probeCell(id int64, mask uint64) uint64 {
	x := uint64(id) ^ 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return (x ^ x>>31) & mask
}

// firstSeen returns ids' distinct values in the order they first appear,
// as a batch's touched rows reach the optimiser.
func firstSeen(ids []int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// thpMode is the kernel's transparent huge page setting, the bracketed word
// of /sys/kernel/mm/transparent_hugepage/enabled, or "unknown".
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "unknown"
	}
	s := string(b)
	if i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']'); i >= 0 && j > i {
		return s[i+1 : j]
	}
	return "unknown"
}
