package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// rawFile builds a checkpoint by hand: the 8-byte length, the header as
// given (not padded), the data.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

// le32 encodes float32s little-endian, independently of the package's own encoder.
func le32(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func le64(v ...int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func randFloats(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func randIDs(rng *rand.Rand, n int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = rng.Int64() - math.MaxInt64/2
	}
	return v
}

// sameFloatBits compares bit patterns, so NaN payloads and -0 count.
func sameFloatBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustWrite(t *testing.T, meta map[string]string, tensors []Tensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := Write(&buf, meta, tensors); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustReader(t *testing.T, data []byte) *File {
	t.Helper()
	f, err := NewReader(bytes.NewReader(data), int64(len(data)), "mem")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// dirNames lists a directory's entries, to catch leftover temporary files.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func wantErrContains(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", substr)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %q does not contain %q", err, substr)
	}
}

var errInjected = errors.New("injected failure")

// failAfter passes n bytes through, then fails: a disk that fills up.
type failAfter struct {
	w io.Writer
	n int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		m, _ := f.w.Write(p[:f.n])
		f.n = 0
		return m, errInjected
	}
	f.n -= len(p)
	return f.w.Write(p)
}
