package pipeline

import (
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
