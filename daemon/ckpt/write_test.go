package ckpt

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
)

// sample is a checkpoint exercising every kind of tensor: empty, scalar,
// large, int64 ids with extreme values, special floats, and a streamed table.
type sample struct {
	meta    map[string]string
	dense   []float32 // "fc1.weight", [1025, 1023]
	ids     []int64   // "emb.ids", [100003]
	special []float32 // "special", [2, 3]
	table   []float32 // "emb.table", [1000, 9], streamed row by row
}

func newSample() sample {
	rng := rand.New(rand.NewPCG(1, 2))
	s := sample{
		meta:  NewMetadata("ctrdnn", 1234),
		dense: randFloats(rng, 1025*1023),
		ids:   append(randIDs(rng, 100_000), math.MinInt64, math.MaxInt64, -1),
		special: []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)),
			math.Float32frombits(0x7fc00001), math.SmallestNonzeroFloat32, math.MaxFloat32},
		table: randFloats(rng, 1000*9),
	}
	s.meta["heterps.optim.name"] = "adam"
	s.meta["heterps.optim.beta1"] = "0.9"
	s.meta["note"] = `quotes " and \ and <&> and β₁ and a newline` + "\n"
	return s
}

func (s sample) tensors() []Tensor {
	return []Tensor{
		Float32("fc1.weight", []int64{1025, 1023}, s.dense),
		Int64("emb.ids", []int64{int64(len(s.ids))}, s.ids),
		Float32("special", []int64{2, 3}, s.special),
		Float32("scalar", []int64{}, []float32{2.5}),
		Float32("empty", []int64{0, 9}, nil),
		Int64("no.ids", []int64{0}, []int64{}),
		Stream("emb.table", F32, []int64{1000, 9}, func(w io.Writer) error {
			for row := range 1000 {
				if err := WriteFloat32(w, s.table[row*9:(row+1)*9]); err != nil {
					return err
				}
			}
			return nil
		}),
	}
}

func (s sample) check(t *testing.T, f *File) {
	t.Helper()
	if got := f.Metadata(); !maps.Equal(got, s.meta) {
		t.Errorf("metadata = %v, want %v", got, s.meta)
	}
	wantShapes := map[string][]int64{"emb.ids": {100_003}, "emb.table": {1000, 9}, "empty": {0, 9},
		"fc1.weight": {1025, 1023}, "no.ids": {0}, "scalar": {}, "special": {2, 3}}
	var names []string
	for _, info := range f.Tensors() {
		names = append(names, info.Name)
		if !slices.Equal(info.Shape, wantShapes[info.Name]) {
			t.Errorf("tensor %q shape = %v, want %v", info.Name, info.Shape, wantShapes[info.Name])
		}
	}
	if want := slices.Sorted(maps.Keys(wantShapes)); !slices.Equal(names, want) {
		t.Errorf("tensors = %v, want %v", names, want)
	}
	for name, want := range map[string][]float32{"fc1.weight": s.dense, "special": s.special,
		"scalar": {2.5}, "empty": {}, "emb.table": s.table} {
		got, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if !sameFloatBits(got, want) {
			t.Errorf("tensor %q differs after the round trip", name)
		}
	}
	for name, want := range map[string][]int64{"emb.ids": s.ids, "no.ids": {}} {
		got, err := f.Int64(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("tensor %q differs after the round trip", name)
		}
	}
	if step, err := f.Step(); err != nil || step != 1234 {
		t.Errorf("Step() = %d, %v; want 1234", step, err)
	}
	if err := f.CheckModel("ctrdnn"); err != nil {
		t.Error(err)
	}
}

func TestRoundTrip(t *testing.T) {
	defer func() { hostLittleEndian = true }()
	s := newSample()
	hostLittleEndian = true
	zeroCopy := roundTrip(t, s)
	hostLittleEndian = false // the portable, converting path of big-endian hosts
	portable := roundTrip(t, s)
	if !bytes.Equal(zeroCopy, portable) {
		t.Error("the zero-copy and the portable encoders wrote different files")
	}
}

// roundTrip writes s with WriteFile, checks what Open reads back and the
// returned digest, and returns the file's bytes.
func roundTrip(t *testing.T, s sample) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.safetensors")
	entry, err := WriteFile(path, s.meta, s.tensors())
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s.check(t, f)
	digest, err := DigestFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if entry != digest {
		t.Errorf("WriteFile returned %+v, the file on disk is %+v", entry, digest)
	}
	return readFile(t, path)
}

// The data section starts 8-aligned and each tensor is aligned to its
// element size, as with the reference implementation's layout.
func TestLayoutIsAligned(t *testing.T) {
	data := mustWrite(t, nil, []Tensor{
		Float32("a", []int64{3}, []float32{1, 2, 3}),
		Int64("b", []int64{1}, []int64{7}),
		Float32("c", []int64{1}, []float32{4}),
		Int64("d", []int64{3}, []int64{1, 2, 3}),
	})
	f := mustReader(t, data)
	if f.dataAt%8 != 0 {
		t.Errorf("data section starts at %d, not 8-aligned", f.dataAt)
	}
	for _, info := range f.Tensors() {
		if (f.dataAt+info.Begin)%info.DType.Size() != 0 {
			t.Errorf("tensor %q starts at %d, not aligned to %d", info.Name, f.dataAt+info.Begin, info.DType.Size())
		}
	}
}

func TestWriteRejectsBadTensors(t *testing.T) {
	ok := func(w io.Writer) error { return WriteFloat32(w, []float32{1, 2}) }
	cases := []struct {
		name    string
		meta    map[string]string
		tensors []Tensor
		want    string
	}{
		{"duplicate name", nil, []Tensor{Float32("a", []int64{1}, []float32{1}), Float32("a", []int64{1}, []float32{2})}, "name used twice"},
		{"empty name", nil, []Tensor{Float32("", []int64{1}, []float32{1})}, "invalid name"},
		{"reserved name", nil, []Tensor{Float32("__metadata__", []int64{1}, []float32{1})}, "invalid name"},
		{"invalid UTF-8 name", nil, []Tensor{Float32("a\xff", []int64{1}, []float32{1})}, "UTF-8"},
		{"invalid UTF-8 metadata", map[string]string{"k": "\xfe"}, nil, "UTF-8"},
		{"length mismatch", nil, []Tensor{Float32("a", []int64{2, 2}, []float32{1, 2, 3})}, "3 elements given, shape [2 2] needs 4"},
		{"negative dimension", nil, []Tensor{Int64("a", []int64{-1}, nil)}, "negative"},
		{"overflow", nil, []Tensor{Stream("a", F32, []int64{math.MaxInt64 / 2, 3}, ok)}, "overflows"},
		{"unknown dtype", nil, []Tensor{Stream("a", DType(9), []int64{2}, ok)}, "unknown dtype"},
		{"zero Tensor", nil, []Tensor{{Name: "a", DType: F32, Shape: []int64{1}}}, "no data"},
		{"stream too short", nil, []Tensor{Stream("a", F32, []int64{3}, ok)}, "wrote 8 bytes, shape [3] of F32 needs 12"},
		{"stream too long", nil, []Tensor{Stream("a", F32, []int64{1}, ok)}, "more bytes than its shape holds"},
		{"stream fails", nil, []Tensor{Stream("a", F32, []int64{2}, func(io.Writer) error { return errInjected })}, "injected"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Write(io.Discard, c.meta, c.tensors)
			wantErrContains(t, err, c.want)
			dir := t.TempDir()
			_, err = WriteFile(filepath.Join(dir, "x.safetensors"), c.meta, c.tensors)
			wantErrContains(t, err, c.want)
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("failed WriteFile left %v behind", names)
			}
		})
	}
}

func TestStreamErrorIsWrapped(t *testing.T) {
	_, err := Write(io.Discard, nil, []Tensor{Stream("t", I64, []int64{1}, func(io.Writer) error { return errInjected })})
	if !errors.Is(err, errInjected) {
		t.Fatalf("error %v does not wrap the callback's error", err)
	}
	wantErrContains(t, err, `tensor "t"`)
}

func TestMetadataOmittedWhenEmpty(t *testing.T) {
	data := mustWrite(t, map[string]string{}, []Tensor{Float32("a", []int64{1}, []float32{1})})
	if bytes.Contains(data, []byte(metadataKey)) {
		t.Errorf("empty metadata written: %q", data)
	}
	if got := mustReader(t, data).Metadata(); len(got) != 0 {
		t.Errorf("metadata = %v, want none", got)
	}
}

func TestWriteFileReplacesAndIsReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	for step := int64(1); step <= 2; step++ {
		if _, err := WriteFile(path, NewMetadata("linreg", step), []Tensor{Float32("w", []int64{1}, []float32{float32(step)})}); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if step, _ := f.Step(); step != 2 {
		t.Errorf("step = %d after overwriting with step 2", step)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != filePerm {
		t.Errorf("mode = %v, want %v", st.Mode().Perm(), os.FileMode(filePerm))
	}
}

// TestWriteFileCountedCountsEveryByte: the counter a long write is watched
// by ends at the file's size, and WriteFile's result is the same file.
func TestWriteFileCountedCountsEveryByte(t *testing.T) {
	s := newSample()
	path := filepath.Join(t.TempDir(), "model.safetensors")
	var written atomic.Int64
	written.Store(7) // it adds to what is there
	entry, err := WriteFileCounted(path, s.meta, s.tensors(), &written)
	if err != nil {
		t.Fatal(err)
	}
	if got := written.Load() - 7; got != entry.Size || entry.Size < 4<<20 {
		t.Errorf("counted %d bytes of a %d-byte file", got, entry.Size)
	}
	if plain := roundTrip(t, s); !bytes.Equal(plain, readFile(t, path)) {
		t.Error("WriteFileCounted and WriteFile wrote different files")
	}
}
