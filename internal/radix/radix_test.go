package radix

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPairsMatchesAStableSort: keys of one to eight bytes, with repeats,
// come out ascending, and each value stays with its key in its original
// order among equal keys.
func TestPairsMatchesAStableSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, top := range []uint64{0, 1, 255, 256, 70_000, 1 << 40, 1<<63 - 1} {
		for _, n := range []int{0, 1, 2, 1000} {
			keys, vals := make([]uint64, n), make([]int32, n)
			for i := range keys {
				keys[i], vals[i] = rng.Uint64N(top+1)%max(1, top/7+1), int32(i) // repeats
			}
			type kv struct {
				k uint64
				v int32
			}
			want := make([]kv, n)
			for i := range keys {
				want[i] = kv{keys[i], vals[i]}
			}
			slices.SortStableFunc(want, func(a, b kv) int { return cmp.Compare(a.k, b.k) })
			Pairs(keys, vals, top)
			for i := range want {
				if keys[i] != want[i].k || vals[i] != want[i].v {
					t.Fatalf("top %d, n %d: [%d] = (%d, %d), want (%d, %d)", top, n, i, keys[i], vals[i], want[i].k, want[i].v)
				}
			}
		}
	}
}

// TestSortOrdersKeys: ints (the parameter server's slots) and keys of one
// to eight bytes, with repeats, come out ascending.
func TestSortOrdersKeys(t *testing.T) {
	ints := []int{69_999, 5, 300, 4, 65_536, 256, 1, 70_000 - 2}
	want := slices.Sorted(slices.Values(ints))
	Sort(ints, 70_000)
	if !slices.Equal(ints, want) {
		t.Fatalf("%v, want %v", ints, want)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, top := range []uint64{0, 1, 255, 256, 70_000, 1 << 40, 1<<63 - 1} {
		for _, n := range []int{0, 1, 2, 1000} {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = rng.Uint64N(top+1) % max(1, top/7+1) // repeats
			}
			want := slices.Sorted(slices.Values(keys))
			Sort(keys, top)
			if !slices.Equal(keys, want) {
				t.Fatalf("top %d, n %d: not ascending", top, n)
			}
		}
	}
}

func TestGetBuffersHoldsNKeysAndValues(t *testing.T) {
	for _, n := range []int{0, 5, 1000, 3} {
		b := GetBuffers(n)
		if len(b.Keys) != n || len(b.Vals) != n {
			t.Fatalf("GetBuffers(%d): %d keys, %d values", n, len(b.Keys), len(b.Vals))
		}
		PutBuffers(b)
	}
}
