package ckpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// referenceTensors are the tensors of the known-answer file below.
func referenceTensors() []Tensor {
	return []Tensor{
		Float32("b", []int64{3}, []float32{0, 1, 2}),
		Int64("a", []int64{2}, []int64{1, 2}),
		Float32("s", []int64{}, []float32{2.5}),
		Float32("z", []int64{0, 3}, nil),
	}
}

// referenceFile is built by hand from the format description: the header the
// reference implementation writes for referenceTensors (I64 before F32, then
// by name; header padded with spaces to a multiple of 8), then the data.
func referenceFile() []byte {
	header := `{"__metadata__":{"heterps.model":"m"},` +
		`"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},` +
		`"b":{"dtype":"F32","shape":[3],"data_offsets":[16,28]},` +
		`"s":{"dtype":"F32","shape":[],"data_offsets":[28,32]},` +
		`"z":{"dtype":"F32","shape":[0,3],"data_offsets":[32,32]}}`
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	data := slices.Concat(le64(1, 2), le32(0, 1, 2), le32(2.5))
	return rawFile(header, data)
}

func TestWriteMatchesHandBuiltFile(t *testing.T) {
	got := mustWrite(t, map[string]string{KeyModel: "m"}, referenceTensors())
	if want := referenceFile(); !bytes.Equal(got, want) {
		t.Fatalf("written file differs from the hand-built one\n got %q\nwant %q", got, want)
	}
}

func TestReadHandBuiltFile(t *testing.T) {
	f := mustReader(t, referenceFile())
	if m, _ := f.Meta(KeyModel); m != "m" {
		t.Errorf("model = %q", m)
	}
	a, err := f.Int64("a")
	if err != nil || !slices.Equal(a, []int64{1, 2}) {
		t.Errorf("a = %v, %v", a, err)
	}
	b, err := f.Float32("b")
	if err != nil || !slices.Equal(b, []float32{0, 1, 2}) {
		t.Errorf("b = %v, %v", b, err)
	}
	s, err := f.Float32("s")
	if err != nil || !slices.Equal(s, []float32{2.5}) {
		t.Errorf("s = %v, %v", s, err)
	}
	if info, _ := f.Tensor("z"); !slices.Equal(info.Shape, []int64{0, 3}) || info.NumElements() != 0 {
		t.Errorf("z = %+v", info)
	}
}

// Unpadded headers and headers with other JSON whitespace, as older writers
// produce, are accepted.
func TestReadUnpaddedHeader(t *testing.T) {
	for _, header := range []string{
		`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`,
		"{ \"a\" : {\"shape\": [ 1 ], \"data_offsets\":[0,4], \"dtype\":\"F32\"} }\n\t\r ",
	} {
		f := mustReader(t, rawFile(header, le32(7)))
		if v, err := f.Float32("a"); err != nil || v[0] != 7 {
			t.Errorf("header %q: a = %v, %v", header, v, err)
		}
	}
}

// pythonSafetensors returns a Python interpreter that has the safetensors
// and numpy packages, or skips the test.
func pythonSafetensors(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	if err := exec.Command(python, "-c", "import safetensors.numpy, numpy").Run(); err != nil {
		t.Skip("python3 cannot import safetensors and numpy; cross-check with the reference skipped")
	}
	return python
}

const pythonDump = `
import json, sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
tensors = load_file(sys.argv[1])
with safe_open(sys.argv[1], framework="np") as f:
    meta = f.metadata()
out = {"meta": meta, "tensors": {}}
for name, a in tensors.items():
    bits = a.view(np.uint32) if a.dtype == np.float32 else a
    out["tensors"][name] = {"dtype": str(a.dtype), "shape": list(a.shape), "values": [int(x) for x in bits.reshape(-1)]}
print(json.dumps(out))
`

// Files this package writes load in the reference Python implementation
// with the same values, shapes and metadata.
func TestPythonReadsOurFile(t *testing.T) {
	python := pythonSafetensors(t)
	s := newSample()
	path := filepath.Join(t.TempDir(), "go.safetensors")
	if _, err := WriteFile(path, s.meta, s.tensors()); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "-c", pythonDump, path).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var dump struct {
		Meta    map[string]string
		Tensors map[string]struct {
			DType  string
			Shape  []int64
			Values []json.Number
		}
	}
	if err := json.Unmarshal(out, &dump); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(dump.Meta, s.meta) {
		t.Errorf("python metadata = %v, want %v", dump.Meta, s.meta)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, info := range f.Tensors() {
		py, ok := dump.Tensors[info.Name]
		if !ok {
			t.Errorf("python did not load tensor %q", info.Name)
			continue
		}
		want := map[DType]string{F32: "float32", I64: "int64"}[info.DType]
		if py.DType != want || !slices.Equal(py.Shape, info.Shape) {
			t.Errorf("tensor %q: python sees %s %v, want %s %v", info.Name, py.DType, py.Shape, want, info.Shape)
		}
		if got, want := pyValues(py.Values), goValues(t, f, info); got != want {
			t.Errorf("tensor %q: python's values differ from ours", info.Name)
		}
	}
}

const pythonWrite = `
import sys
import numpy as np
from safetensors.numpy import save_file
save_file({
    "w": (np.arange(12, dtype=np.float32) * 0.5 - 1).reshape(3, 4),
    "ids": np.array([-(2**63), -1, 0, 2**63 - 1], dtype=np.int64),
    "s": np.array(3.25, dtype=np.float32),
    "e": np.zeros((2, 0), dtype=np.float32),
}, sys.argv[1], metadata={"heterps.model": "ctrdnn"})
`

// Files the reference Python implementation writes read here; and for the
// same tensors and a single metadata key this package writes the same bytes.
func TestWeReadPythonFile(t *testing.T) {
	python := pythonSafetensors(t)
	path := filepath.Join(t.TempDir(), "py.safetensors")
	if out, err := exec.Command(python, "-c", pythonWrite, path).CombinedOutput(); err != nil {
		t.Fatalf("python: %v: %s", err, out)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.CheckModel("ctrdnn"); err != nil {
		t.Error(err)
	}
	w := make([]float32, 12)
	for i := range w {
		w[i] = float32(i)*0.5 - 1
	}
	ids := []int64{math.MinInt64, -1, 0, math.MaxInt64}
	tensors := []Tensor{
		Float32("w", []int64{3, 4}, w), Int64("ids", []int64{4}, ids),
		Float32("s", []int64{}, []float32{3.25}), Float32("e", []int64{2, 0}, nil),
	}
	for _, tt := range tensors {
		info, ok := f.Tensor(tt.Name)
		if !ok || info.DType != tt.DType || !slices.Equal(info.Shape, tt.Shape) {
			t.Errorf("tensor %q = %+v, want %s %v", tt.Name, info, tt.DType, tt.Shape)
		}
	}
	if got, _ := f.Float32("w"); !slices.Equal(got, w) {
		t.Errorf("w = %v, want %v", got, w)
	}
	if got, _ := f.Int64("ids"); !slices.Equal(got, ids) {
		t.Errorf("ids = %v, want %v", got, ids)
	}
	if ours := mustWrite(t, map[string]string{KeyModel: "ctrdnn"}, tensors); !bytes.Equal(ours, readFile(t, path)) {
		t.Errorf("our bytes differ from python's\n ours %q\npython %q", ours, readFile(t, path))
	}
}

func pyValues(v []json.Number) string { return fmt.Sprint(v) }

// goValues renders a tensor as python's dump does: float32 as bit patterns.
func goValues(t *testing.T, f *File, info TensorInfo) string {
	t.Helper()
	var out []string
	switch info.DType {
	case F32:
		v, err := f.Float32(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range v {
			out = append(out, fmt.Sprint(math.Float32bits(x)))
		}
	case I64:
		v, err := f.Int64(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range v {
			out = append(out, fmt.Sprint(x))
		}
	}
	return "[" + strings.Join(out, " ") + "]"
}
