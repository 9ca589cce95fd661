package data

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestLibsvmParsesFeatures(t *testing.T) {
	path := writeFile(t, "a.svm", "+1 1:0.5 3:2 4:1 9:1 7:0\n-1\t2:-3   5:1\n0 4:1\n")
	b := readAll(t, mustOpen(t, OpenLibsvm, path, Options{DenseDims: 3, Vocab: 4}))
	want := &Batch{
		Size: 3, NumDense: 3, Slots: 1,
		Dense:   []float32{0.5, 0, 2, 0, -3, 0, 0, 0, 0},
		Offsets: []int64{0, 2, 3, 4},
		IDs:     []int64{0, 5 % 4, 1, 0}, // index 4 -> id 0, 9 -> 5 mod 4; 7:0 dropped
		Labels:  []float32{1, 0, 0},
	}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("got %+v\nwant %+v", b, want)
	}
}

func TestLibsvmRoundTrip(t *testing.T) {
	const dense, vocab = 5, 1000
	rng := rand.New(rand.NewPCG(7, 7))
	want := newBatch(Schema{NumDense: dense, Slots: 1, Vocab: vocab, Task: TaskCTR}, 0, false)
	for range 300 {
		r := &record{dense: make([]float32, dense), label: float32(rng.IntN(2))}
		for j := range r.dense {
			if rng.IntN(3) > 0 {
				r.dense[j] = float32(rng.NormFloat64())
			}
		}
		for range rng.IntN(6) {
			r.ids = append(r.ids, rng.Int64N(vocab))
		}
		r.endBag()
		want.add(r)
	}
	var text bytes.Buffer
	if err := WriteLibsvm(&text, want); err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "rt.svm", text.String())
	got := readAll(t, mustOpen(t, OpenLibsvm, path, Options{DenseDims: dense, Vocab: vocab}), 13, 50)
	if !reflect.DeepEqual(got, want) {
		t.Fatal("libsvm round trip changed the batch")
	}
}

func TestLibsvmMalformedLines(t *testing.T) {
	for _, line := range []string{"2 1:1", "1 a:1", "1 0:1", "1 3", "1 3:x", "x"} {
		path := writeFile(t, "bad.svm", "1 1:1\n"+line+"\n")
		le := lineErrorOf(t, mustOpen(t, OpenLibsvm, path, Options{}))
		if le.Line != 2 {
			t.Errorf("%q: got %v, want line 2", line, le)
		}
	}
}

func TestWriteLibsvmRefusesSlots(t *testing.T) {
	b := &Batch{Slots: 2, Offsets: []int64{0}}
	if err := WriteLibsvm(&bytes.Buffer{}, b); err == nil {
		t.Fatal("a two-slot batch was written")
	}
}
