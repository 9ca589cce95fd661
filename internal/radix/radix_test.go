package radix

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortMatchesAStableSort: keys of one to eight bytes, with repeats,
// come out ascending, and each value stays with its key in its original
// order among equal keys, by Sort and by Pairs.
func TestSortMatchesAStableSort(t *testing.T) {
	for name, sort := range map[string]func([]uint64, []int32, uint64){"Sort": Sort[uint64, int32], "Pairs": Pairs} {
		t.Run(name, func(t *testing.T) { checkStableSort(t, sort) })
	}
}

func checkStableSort(t *testing.T, sort func([]uint64, []int32, uint64)) {
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
			sort(keys, vals, top)
			for i := range want {
				if keys[i] != want[i].k || vals[i] != want[i].v {
					t.Fatalf("top %d, n %d: [%d] = (%d, %d), want (%d, %d)", top, n, i, keys[i], vals[i], want[i].k, want[i].v)
				}
			}
		}
	}
}

// TestSortWithoutValues sorts ints alone (the parameter server's slots).
func TestSortWithoutValues(t *testing.T) {
	keys := []int{69_999, 5, 300, 4, 65_536, 256, 1, 70_000 - 2}
	want := slices.Sorted(slices.Values(keys))
	Sort[int, struct{}](keys, nil, 70_000)
	if !slices.Equal(keys, want) {
		t.Fatalf("%v, want %v", keys, want)
	}
}
