package data

import (
	"strings"
	"testing"
)

// Validate is the readers' tests' oracle: it accepts a well-formed batch
// and refuses each broken invariant, naming it, so that a reader that
// breaks one fails its test.
func TestValidateRefusesEachBrokenInvariant(t *testing.T) {
	ctr := Schema{NumDense: 1, Slots: 2, Vocab: 10, Task: TaskCTR}
	classify := Schema{NumDense: 1, Slots: 2, Vocab: 10, NumClasses: 3, Task: TaskClassify}
	good := func() *Batch {
		return &Batch{Size: 2, NumDense: 1, Slots: 2, Dense: []float32{0.5, 1.5},
			Offsets: []int64{0, 1, 3, 3, 4}, IDs: []int64{1, 2, 9, 0}, Labels: []float32{0, 1}}
	}
	for _, tc := range []struct {
		name   string
		schema Schema
		change func(*Batch)
		want   string // "" for accepted
	}{
		{"well formed", ctr, func(*Batch) {}, ""},
		{"classes of a classifier", classify, func(b *Batch) { b.Classes = []int64{0, 2} }, ""},
		{"shape", ctr, func(b *Batch) { b.Slots = 3 }, "shape 1 dense x 3 slots, schema 1 x 2"},
		{"dense values", ctr, func(b *Batch) { b.Dense = b.Dense[:1] }, "1 dense values, want 2"},
		{"offsets count", ctr, func(b *Batch) { b.Offsets = b.Offsets[:4] }, "4 offsets, want 5 starting at 0"},
		{"offsets start", ctr, func(b *Batch) { b.Offsets[0] = 1 }, "want 5 starting at 0"},
		{"offsets end", ctr, func(b *Batch) { b.IDs = append(b.IDs, 3) }, "offsets end at 4, 5 ids"},
		{"labels", ctr, func(b *Batch) { b.Labels = b.Labels[:1] }, "1 labels, want 2"},
		{"classes of a CTR task", ctr, func(b *Batch) { b.Classes = []int64{0, 1} }, "2 classes for a ctr task"},
		{"a classifier without classes", classify, func(*Batch) {}, "0 classes for a classify task"},
		{"probabilities", ctr, func(b *Batch) { b.Probs = []float32{0.5} }, "1 probabilities, want 2"},
		{"decreasing offsets", ctr, func(b *Batch) { b.Offsets[2] = 0 }, "offsets decrease at bag 2"},
		{"an id past the vocabulary", ctr, func(b *Batch) { b.IDs[2] = 10 }, "id 10 at 2 outside vocabulary [0, 10)"},
		{"a negative id", ctr, func(b *Batch) { b.IDs[0] = -1 }, "id -1 at 0 outside"},
		{"a class out of range", classify, func(b *Batch) { b.Classes = []int64{0, 3} }, "class 3 of sample 1 outside [0, 3)"},
	} {
		b := good()
		tc.change(b)
		err := b.Validate(tc.schema)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
