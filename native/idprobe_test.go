package native

import (
	"errors"
	"math"
	"testing"
)

// probeMap is a reference id map with the layout ProbeIDs reads.
type probeMap struct {
	keys  []int64
	slots []int32
}

func probeCell(id int64, mask uint64) uint64 {
	x := uint64(id) ^ 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return (x ^ x>>31) & mask
}

func newProbeMap(capacity int, ids []int64) probeMap {
	m := probeMap{keys: make([]int64, capacity), slots: make([]int32, capacity)}
	mask := uint64(capacity - 1)
	for k, id := range ids {
		i := probeCell(id, mask)
		for m.slots[i] != 0 && m.keys[i] != id {
			i = (i + 1) & mask
		}
		m.keys[i], m.slots[i] = id, int32(k+1)
	}
	return m
}

// ProbeIDs finds every id put, with its slot, and no id never put, with
// prefetching on and off, across map sizes that wrap probes around the end
// and batches shorter and longer than the prefetch distance.
func TestProbeIDsFindsWhatWasPut(t *testing.T) {
	defer SetRowPrefetch(true)
	rng := newRNG(61)
	for _, capacity := range []int{1, 2, 16, 1 << 12} {
		held := make([]int64, capacity/2)
		seen := map[int64]int{}
		for k := range held {
			id := rng.Int64() - math.MaxInt64/2
			if k < 3 {
				id = []int64{0, -1, math.MinInt64}[k]
			}
			held[k] = id
			seen[id] = k
		}
		m := newProbeMap(capacity, held)
		for _, n := range []int{0, 1, 7, 8, 9, 100, 3000} {
			ids := make([]int64, n)
			for j := range ids {
				if len(held) > 0 && j%3 != 0 {
					ids[j] = held[rng.IntN(len(held))]
				} else {
					ids[j] = rng.Int64()
				}
			}
			for _, ahead := range []bool{false, true} {
				SetRowPrefetch(ahead)
				out := make([]int, n)
				missing, err := ProbeIDs(m.keys, m.slots, ids, out)
				if err != nil {
					t.Fatal(err)
				}
				want := 0
				for j, id := range ids {
					k, ok := seen[id]
					if !ok {
						want++
						k = -1
					}
					if out[j] != k {
						t.Fatalf("cap %d n %d prefetch %v: id %d at slot %d, want %d", capacity, n, ahead, id, out[j], k)
					}
				}
				if missing != want {
					t.Fatalf("cap %d n %d prefetch %v: %d missing, want %d", capacity, n, ahead, missing, want)
				}
			}
		}
	}
}

// A full map is searched once round: an id it lacks is absent, not a hang.
func TestProbeIDsEndsOnAFullMap(t *testing.T) {
	defer SetRowPrefetch(true)
	m := newProbeMap(8, []int64{1, 2, 3, 4, 5, 6, 7, 8})
	for _, ahead := range []bool{false, true} {
		SetRowPrefetch(ahead)
		out := make([]int, 2)
		missing, err := ProbeIDs(m.keys, m.slots, []int64{9, 5}, out)
		if err != nil || missing != 1 || out[0] != -1 || out[1] != 4 {
			t.Fatalf("prefetch %v: %d missing, slots %v, %v; want 1 missing, [-1 4]", ahead, missing, out, err)
		}
	}
}

func TestProbeIDsRefusesBadShapes(t *testing.T) {
	ids := []int64{1, 2}
	for name, c := range map[string]struct {
		keys  []int64
		slots []int32
		out   []int
	}{
		"no cells":    {nil, nil, make([]int, 2)},
		"3 cells":     {make([]int64, 3), make([]int32, 3), make([]int, 2)},
		"slots short": {make([]int64, 4), make([]int32, 2), make([]int, 2)},
		"out short":   {make([]int64, 4), make([]int32, 4), make([]int, 1)},
	} {
		if _, err := ProbeIDs(c.keys, c.slots, ids, c.out); !errors.Is(err, ErrArg) {
			t.Errorf("%s: %v, want ErrArg", name, err)
		}
	}
}
