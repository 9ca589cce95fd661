package data

import (
	"context"
	"fmt"
)

// Batch is one mini-batch in the layout the model layers consume.
//
// Sources return a freshly allocated Batch from every Next call; the caller
// owns it and may keep it.
type Batch struct {
	Size     int       // samples in this batch
	Dense    []float32 // Size x NumDense, row-major (after log(1+x) for Criteo integers)
	NumDense int
	Slots    int       // sparse slots per sample
	Offsets  []int64   // CSR over bags: bag j = sample*Slots + slot holds IDs[Offsets[j]:Offsets[j+1]]; len = Size*Slots+1
	IDs      []int64   // hashed ids, each in [0, Vocab)
	Labels   []float32 // Size: 0/1 click labels (CTR), or regression targets; the class as a number for classifiers
	Classes  []int64   // Size: class ids for classifiers (digits), nil otherwise
	Probs    []float32 // Size: true click probability of each sample (synthetic data only), nil otherwise
}

// Bag returns the ids of one sample's slot.
func (b *Batch) Bag(sample, slot int) []int64 {
	j := sample*b.Slots + slot
	return b.IDs[b.Offsets[j]:b.Offsets[j+1]]
}

// Validate checks the batch's invariants against a schema: slice lengths,
// monotone offsets, ids inside the vocabulary, labels and classes in range.
func (b *Batch) Validate(s Schema) error {
	switch {
	case b.NumDense != s.NumDense || b.Slots != s.Slots:
		return fmt.Errorf("batch: shape %d dense x %d slots, schema %d x %d", b.NumDense, b.Slots, s.NumDense, s.Slots)
	case len(b.Dense) != b.Size*b.NumDense:
		return fmt.Errorf("batch: %d dense values, want %d", len(b.Dense), b.Size*b.NumDense)
	case len(b.Offsets) != b.Size*b.Slots+1 || b.Offsets[0] != 0:
		return fmt.Errorf("batch: %d offsets, want %d starting at 0", len(b.Offsets), b.Size*b.Slots+1)
	case b.Offsets[len(b.Offsets)-1] != int64(len(b.IDs)):
		return fmt.Errorf("batch: offsets end at %d, %d ids", b.Offsets[len(b.Offsets)-1], len(b.IDs))
	case len(b.Labels) != b.Size:
		return fmt.Errorf("batch: %d labels, want %d", len(b.Labels), b.Size)
	case (s.Task == TaskClassify) != (b.Classes != nil) || (b.Classes != nil && len(b.Classes) != b.Size):
		return fmt.Errorf("batch: %d classes for a %s task of %d samples", len(b.Classes), s.Task, b.Size)
	case b.Probs != nil && len(b.Probs) != b.Size:
		return fmt.Errorf("batch: %d probabilities, want %d", len(b.Probs), b.Size)
	}
	for j := 1; j < len(b.Offsets); j++ {
		if b.Offsets[j] < b.Offsets[j-1] {
			return fmt.Errorf("batch: offsets decrease at bag %d", j)
		}
	}
	for i, id := range b.IDs {
		if id < 0 || id >= s.Vocab {
			return fmt.Errorf("batch: id %d at %d outside vocabulary [0, %d)", id, i, s.Vocab)
		}
	}
	for i, c := range b.Classes {
		if c < 0 || c >= int64(s.NumClasses) {
			return fmt.Errorf("batch: class %d of sample %d outside [0, %d)", c, i, s.NumClasses)
		}
	}
	return nil
}

// Task is what the labels of a source mean.
type Task int

const (
	TaskCTR      Task = iota + 1 // binary 0/1 click labels
	TaskClassify                 // class ids in Batch.Classes
	TaskRegress                  // real-valued targets in Batch.Labels
)

// String returns the task's name as model files spell it.
func (t Task) String() string {
	switch t {
	case TaskCTR:
		return "ctr"
	case TaskClassify:
		return "classify"
	case TaskRegress:
		return "regress"
	}
	return fmt.Sprintf("task(%d)", int(t))
}

// Schema describes the batches a source produces.
type Schema struct {
	NumDense   int   // dense features per sample
	Slots      int   // sparse slots per sample
	Vocab      int64 // ids lie in [0, Vocab); 0 when there are no slots
	NumClasses int   // classes of a classifier, 0 otherwise
	Task       Task
}

// Source streams mini-batches. A Source is not safe for concurrent use.
type Source interface {
	// Next returns the next batch of at most size samples; size may change
	// from call to call. A batch holds fewer than size samples only at the
	// end of the stream, and after the last batch Next returns io.EOF. A
	// malformed line (*LineError) or a read error ends the stream: later
	// calls return the same error.
	Next(ctx context.Context, size int) (*Batch, error)
	Schema() Schema
	// BadLines counts the malformed lines skipped so far (SkipBadLines).
	BadLines() int64
	Close() error
}

// record is one sample while it is parsed, before it joins a batch; its
// slices are reused from sample to sample.
type record struct {
	dense  []float32
	ids    []int64
	bagEnd []int // end of each slot's ids inside ids
	label  float32
	class  int64
	prob   float32
}

func newRecord(s Schema) *record {
	return &record{
		dense:  make([]float32, s.NumDense),
		ids:    make([]int64, 0, s.Slots),
		bagEnd: make([]int, 0, s.Slots),
	}
}

func (r *record) reset() {
	clear(r.dense)
	r.ids = r.ids[:0]
	r.bagEnd = r.bagEnd[:0]
	r.label, r.class, r.prob = 0, 0, 0
}

// endBag closes the current slot's bag.
func (r *record) endBag() { r.bagEnd = append(r.bagEnd, len(r.ids)) }

// maxPrealloc bounds the samples a new batch reserves room for, so that an
// absurd size cannot allocate gigabytes before any data is read.
const maxPrealloc = 1 << 16

func newBatch(s Schema, size int, withProbs bool) *Batch {
	n := min(size, maxPrealloc)
	b := &Batch{
		NumDense: s.NumDense,
		Slots:    s.Slots,
		Dense:    make([]float32, 0, n*s.NumDense),
		Offsets:  make([]int64, 1, n*s.Slots+1),
		IDs:      make([]int64, 0, n*s.Slots),
		Labels:   make([]float32, 0, n),
	}
	if s.Task == TaskClassify {
		b.Classes = make([]int64, 0, n)
	}
	if withProbs {
		b.Probs = make([]float32, 0, n)
	}
	return b
}

func (b *Batch) add(r *record) {
	b.Dense = append(b.Dense, r.dense...)
	base := int64(len(b.IDs))
	b.IDs = append(b.IDs, r.ids...)
	for _, end := range r.bagEnd {
		b.Offsets = append(b.Offsets, base+int64(end))
	}
	b.Labels = append(b.Labels, r.label)
	if b.Classes != nil {
		b.Classes = append(b.Classes, r.class)
	}
	if b.Probs != nil {
		b.Probs = append(b.Probs, r.prob)
	}
	b.Size++
}

func checkSize(size int) error {
	if size <= 0 {
		return fmt.Errorf("data: batch size %d, want > 0", size)
	}
	return nil
}
