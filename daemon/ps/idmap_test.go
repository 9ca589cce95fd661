package ps

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIDMapMatchesAGoMap: random puts (repeats overwrite) and gets, across
// several growths, with zero, negative and extreme ids, agree with a Go map.
func TestIDMapMatchesAGoMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	m, want := newIDMap(), map[int64]int{}
	special := []int64{0, -1, math.MinInt64, math.MaxInt64, 1 << 40}
	for i := range 50_000 {
		id := rng.Int64N(30_000) - 10_000
		if i < len(special) {
			id = special[i]
		}
		m.put(id, i)
		want[id] = i
	}
	if m.len() != len(want) {
		t.Fatalf("%d ids held, want %d", m.len(), len(want))
	}
	for id, slot := range want {
		if got, ok := m.get(id); !ok || got != slot {
			t.Fatalf("get(%d) = %d, %v; want %d", id, got, ok, slot)
		}
	}
	for range 10_000 {
		id := rng.Int64N(1<<50) + 1<<40 + 1
		if _, ok := want[id]; ok {
			continue
		}
		if got, ok := m.get(id); ok {
			t.Fatalf("get(%d) = %d for an id never put", id, got)
		}
	}
}

// BenchmarkIDMap compares a ctrdnn step's 26,000 lookups among a million
// ids with a Go map's.
func BenchmarkIDMap(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	all := make([]int64, 1<<20)
	for i := range all {
		all[i] = rng.Int64N(1 << 40)
	}
	queries := make([]int64, 26_000)
	for i := range queries {
		u := rng.Float64()
		queries[i] = all[int(u*u*float64(len(all)))]
	}
	b.Run("idMap", func(b *testing.B) {
		m := newIDMap()
		for i, id := range all {
			m.put(id, i)
		}
		sum := 0
		for b.Loop() {
			for _, id := range queries {
				s, _ := m.get(id)
				sum += s
			}
		}
	})
	b.Run("go-map", func(b *testing.B) {
		m := make(map[int64]int, len(all))
		for i, id := range all {
			m[id] = i
		}
		sum := 0
		for b.Loop() {
			for _, id := range queries {
				sum += m[id]
			}
		}
	})
}

// probe, the batched lookup in native code, agrees with get id by id: the
// native hash and cells are the map's own, across growths.
func TestIDMapProbeAgreesWithGet(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	m := newIDMap()
	for round := range 6 {
		for range 3000 << round {
			m.put(rng.Int64N(1<<20)-1<<19, rng.IntN(1<<30))
		}
		ids := make([]int64, 5000)
		for i := range ids {
			ids[i] = rng.Int64N(1<<21) - 1<<20
		}
		slots := make([]int, len(ids))
		missing, want := m.probe(ids, slots), 0
		for i, id := range ids {
			k, ok := m.get(id)
			if !ok {
				k = -1
				want++
			}
			if slots[i] != k {
				t.Fatalf("round %d: probe(%d) = %d, get = %d", round, id, slots[i], k)
			}
		}
		if missing != want || want == 0 || want == len(ids) {
			t.Fatalf("round %d: %d missing, get finds %d missing of %d", round, missing, want, len(ids))
		}
	}
}

// Given fewer slots than ids, probe answers as far as the slots go, id by
// id, and counts only those ids' misses.
func TestIDMapProbeWithFewerSlotsAnswersThoseIDs(t *testing.T) {
	m := newIDMap()
	m.put(7, 70)
	m.put(9, 90)
	slots := []int{-5, -5, -5}
	missing := m.probe([]int64{9, 8, 7, 6, 5}, slots)
	if want := []int{90, -1, 70}; !slices.Equal(slots, want) || missing != 1 {
		t.Fatalf("probe = %v with %d missing, want %v with 1", slots, missing, want)
	}
}
