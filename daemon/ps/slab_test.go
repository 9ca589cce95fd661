package ps

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// Every slot lies in exactly one slab, the slabs follow one another
// without gaps, the growing ones double from DefaultSlabRows and the
// full-grown ones hold the most rows of dim floats that fit slabBytes a
// buffer (a power of two, at least DefaultSlabRows); a fixed size is kept.
func TestSlabSizesLayOutEverySlotOnce(t *testing.T) {
	for _, c := range []struct{ fixed, dim int }{{4, 5}, {256, 9}, {0, 1}, {0, 5}, {0, 9}, {0, 64}, {0, 4096}} {
		t.Run(fmt.Sprintf("fixed%d-dim%d", c.fixed, c.dim), func(t *testing.T) {
			z := slabSizesFor(c.fixed, c.dim)
			if c.fixed > 0 && (z.rows(0) != c.fixed || z.rows(5) != c.fixed) {
				t.Fatalf("fixed %d: slabs of %d and %d rows", c.fixed, z.rows(0), z.rows(5))
			}
			if c.fixed == 0 {
				full := z.rows(z.grown)
				if full < DefaultSlabRows || full&(full-1) != 0 || (full > DefaultSlabRows && full*4*c.dim > slabBytes) || 2*full*4*c.dim <= slabBytes {
					t.Fatalf("full-grown slabs of %d rows of %d floats; slabBytes %d", full, c.dim, slabBytes)
				}
				for i := range z.grown {
					if z.rows(i) != DefaultSlabRows<<i {
						t.Fatalf("growing slab %d holds %d rows, want %d", i, z.rows(i), DefaultSlabRows<<i)
					}
				}
			}
			slab, row := 0, 0
			for slot := range z.start(z.grown + 3) {
				if z.start(slab) != slot-row {
					t.Fatalf("slab %d starts at %d, want %d", slab, z.start(slab), slot-row)
				}
				if si, r := z.locate(slot); si != slab || r != row {
					t.Fatalf("slot %d located in slab %d row %d, want slab %d row %d", slot, si, r, slab, row)
				}
				if row++; row == z.rows(slab) {
					slab, row = slab+1, 0
				}
			}
		})
	}
}

// A table on growing slabs trains, checkpoints and restores the same bits
// as one on fixed slabs of 4 rows: the layout is the shard's own.
func TestGrowingSlabsTrainAndRestoreAsFixedOnes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ids := make([]int64, 3*DefaultSlabRows+100) // over three growing slabs
	for i := range ids {
		ids[i] = int64(i*3 + 1)
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	grads := [][]float32{randFloats(rng, len(ids)*testDim), randFloats(rng, len(ids)*testDim)}
	var rows, restored [2][]float32
	for i, slabRows := range []int{4, 0} {
		cfg := testConfig(t, BSP, 0, 1, 1, adam)
		cfg.SlabRows, cfg.Blocks = slabRows, nil
		var s *Shard
		s, rows[i] = trainShard(t, cfg, ids, grads)
		dir, err := CheckpointAll(context.Background(), t.TempDir(), 2, []*Shard{s})
		if err != nil {
			t.Fatal(err)
		}
		other := cfg
		other.SlabRows = 4 - slabRows // restored onto the other layout
		back, err := RestoreAll([]Config{other}, dir)
		if err != nil {
			t.Fatal(err)
		}
		restored[i] = pullRows(t, back[0], ids, 2)
	}
	if !bitsEqual(rows[0], rows[1]) {
		t.Fatal("rows trained on growing slabs differ from those on fixed slabs")
	}
	for i := range restored {
		if !bitsEqual(restored[i], rows[0]) {
			t.Fatalf("layout %d: rows restored onto the other layout differ from those saved", i)
		}
	}
}
