package pipeline

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/heterps/heterps/native"
)

// TestPlanRowsMatchesItsDefinition checks a row plan against the ids it
// came from: uniq is the distinct ids ascending, the local batch maps back
// to the original ids, and each embedding's rows are exactly the distinct
// rows its slots use.
func TestPlanRowsMatchesItsDefinition(t *testing.T) {
	m := buildModel(t, modelConfig(t, adamAdagrad))
	c, err := newCopy(m, Range{First: 0, Last: m.NumLayers() - 1}, &Config{Backend: native.MustCPU()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(20) {
		b := testBatch(3, i, 1+int(i))
		plan, err := planRows(b, c.tables)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Compact(slices.Sorted(slices.Values(b.IDs)))
		uniq := plan.tables[0].ids
		if !slices.Equal(uniq, want) {
			t.Fatalf("batch %d: uniq %v, want %v", i, uniq, want)
		}
		for j, k := range plan.local.IDs {
			if uniq[k] != b.IDs[j] {
				t.Fatalf("batch %d: id %d renumbered to row %d = id %d", i, b.IDs[j], k, uniq[k])
			}
		}
		for e, emb := range c.tables {
			if !slices.Equal(plan.tables[e].ids, uniq) {
				t.Fatalf("batch %d embedding %d: rows of ids %v, want the batch's %v", i, e, plan.tables[e].ids, uniq)
			}
			first, end := emb.embedding.SlotRange()
			var used []int64
			for j := 0; j+1 < len(b.Offsets); j++ {
				if slot := j % b.Slots; slot >= first && slot < end {
					used = append(used, plan.local.IDs[b.Offsets[j]:b.Offsets[j+1]]...)
				}
			}
			if want := slices.Compact(slices.Sorted(slices.Values(used))); !slices.Equal(plan.tables[e].used, want) {
				t.Fatalf("batch %d embedding %d: rows %v, want %v", i, e, plan.tables[e].used, want)
			}
		}
		if &plan.local.IDs[0] == &b.IDs[0] {
			t.Fatal("the plan renumbered the caller's ids in place")
		}
	}
}

func TestPlanRowsRefusesABatchWithTooFewSlots(t *testing.T) {
	m := buildModel(t, modelConfig(t, adamAdagrad))
	c, err := newCopy(m, Range{First: 0, Last: m.NumLayers() - 1}, &Config{Backend: native.MustCPU()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := testBatch(3, 1, 2)
	b.Slots = 1
	if _, err := planRows(b, c.tables); err == nil {
		t.Fatal("no error for a batch with 1 slot and a layer reading slots [2, 4)")
	}
}

// TestLocalIDsMatchASortedDedup: the radix-sorted renumbering equals the
// obvious one (sort, dedup, binary search) on ids of every range,
// negative and extreme ones included.
func TestLocalIDsMatchASortedDedup(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	cases := [][]int64{nil, {5}, {3, 3, 3}, {math.MinInt64, math.MaxInt64, 0, -1, 1, math.MaxInt64}}
	for _, span := range []int64{2, 300, 1 << 20, 1 << 40, math.MaxInt64} {
		ids := make([]int64, 1+rng.IntN(5000))
		for i := range ids {
			ids[i] = rng.Int64N(span) - span/2
		}
		cases = append(cases, ids)
	}
	for _, ids := range cases {
		want := slices.Compact(slices.Sorted(slices.Values(ids)))
		uniq, local := localIDs(ids)
		if !slices.Equal(uniq, want) {
			t.Fatalf("uniq of %d ids: %v..., want %v...", len(ids), head(uniq), head(want))
		}
		for i, id := range ids {
			if uniq[local[i]] != id {
				t.Fatalf("id %d renumbered to %d, which is id %d", id, local[i], uniq[local[i]])
			}
		}
	}
}

func head(v []int64) []int64 { return v[:min(len(v), 5)] }

// BenchmarkLocalIDs renumbers a ctrdnn batch's ids: 512 samples x 26 slots
// of hashed ids below 10^6.
func BenchmarkLocalIDs(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int64, 512*26)
	for i := range ids {
		u := rng.Float64()
		ids[i] = int64(u * u * 1e6)
	}
	for b.Loop() {
		localIDs(ids)
	}
}

// TestSlotIDsListTheRowsOfTheSlotRange: the rows a slot range's bags read,
// against the rows gathered bag by bag, for the whole range (every row of
// the batch) and for parts of it.
func TestSlotIDsListTheRowsOfTheSlotRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const rows, slots = 40, 5
	var ids, offsets []int64
	for range rows * slots {
		offsets = append(offsets, int64(len(ids)))
		for range rng.IntN(3) { // empty bags too
			ids = append(ids, rng.Int64N(60))
		}
	}
	offsets = append(offsets, int64(len(ids)))
	uniq, local := localIDs(ids)
	for _, r := range [][2]int{{0, slots}, {0, 1}, {2, 4}, {4, 5}} {
		var want []int64
		for j := 0; j+1 < len(offsets); j++ {
			if s := j % slots; s >= r[0] && s < r[1] {
				want = append(want, local[offsets[j]:offsets[j+1]]...)
			}
		}
		want = slices.Compact(slices.Sorted(slices.Values(want)))
		if got := slotIDs(offsets, local, len(uniq), slots, r[0], r[1]); !slices.Equal(got, want) {
			t.Fatalf("slots %v: rows %v, want %v", r, got, want)
		}
	}
}
