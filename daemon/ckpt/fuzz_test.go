package ckpt

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus under testdata/fuzz/FuzzRead")

// FuzzRead feeds arbitrary bytes to the reader. It must never panic or
// allocate past the input's size; a file it accepts must read back in full,
// tile its data section exactly, and survive a write and re-read unchanged.
func FuzzRead(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		cf, err := NewReader(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			return
		}
		tensors, total := readAllTensors(t, cf)
		if cf.dataAt+total != int64(len(data)) {
			t.Fatalf("tensors cover %d data bytes; the file has %d after the header", total, int64(len(data))-cf.dataAt)
		}
		var buf bytes.Buffer
		if _, err := Write(&buf, cf.Metadata(), tensors); err != nil {
			t.Fatalf("rewriting an accepted file: %v", err)
		}
		again, err := NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "rewritten")
		if err != nil {
			t.Fatalf("re-reading the rewritten file: %v", err)
		}
		if !maps.Equal(cf.Metadata(), again.Metadata()) {
			t.Fatalf("metadata changed: %v, then %v", cf.Metadata(), again.Metadata())
		}
		retensors, _ := readAllTensors(t, again)
		if len(retensors) != len(tensors) {
			t.Fatalf("%d tensors, then %d", len(tensors), len(retensors))
		}
		for i := range tensors {
			if !sameTensor(tensors[i], retensors[i]) {
				t.Fatalf("tensor %q changed in the rewrite", tensors[i].Name)
			}
		}
	})
}

// readAllTensors reads every tensor of f as a writable Tensor and returns
// them, sorted by name, with their total byte length.
func readAllTensors(t *testing.T, f *File) ([]Tensor, int64) {
	var out []Tensor
	var total int64
	for _, info := range f.Tensors() {
		total += info.End - info.Begin
		switch info.DType {
		case F32:
			v, err := f.Float32(info.Name)
			if err != nil {
				t.Fatalf("reading accepted tensor %q: %v", info.Name, err)
			}
			out = append(out, Float32(info.Name, info.Shape, v))
		case I64:
			v, err := f.Int64(info.Name)
			if err != nil {
				t.Fatalf("reading accepted tensor %q: %v", info.Name, err)
			}
			out = append(out, Int64(info.Name, info.Shape, v))
		}
	}
	return out, total
}

// sameTensor compares two tensors by encoding both.
func sameTensor(a, b Tensor) bool {
	var ab, bb bytes.Buffer
	return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) &&
		a.write(&ab) == nil && b.write(&bb) == nil && bytes.Equal(ab.Bytes(), bb.Bytes())
}

// fuzzSeeds are the seed corpus: valid files and broken ones, one of each
// kind of damage the reader checks for.
func fuzzSeeds(t *testing.T) map[string][]byte {
	valid := mustWrite(t, NewMetadata("ctrdnn", 3), []Tensor{
		Float32("fc.w", []int64{2, 3}, []float32{1, -2, 3.5, 0, 1e-3, -7}),
		Int64("ids", []int64{3}, []int64{-1, 0, 1 << 40}),
		Float32("s", []int64{}, []float32{2.5}),
		Float32("z", []int64{0, 4}, nil),
	})
	a8 := tensorJSON("a", "F32", "[2]", 0, 8)
	return map[string][]byte{
		"valid":                valid,
		"valid-reference":      referenceFile(),
		"valid-empty":          mustWrite(t, nil, nil),
		"truncated":            valid[:len(valid)-3],
		"trailing-bytes":       append(slices.Clone(valid), 0, 0, 0, 0),
		"header-length-huge":   append(le64(1<<40), valid[8:]...),
		"header-garbage":       rawFile(`{"a":{"dtype":"F32",`, nil),
		"header-trailing-data": rawFile("{"+a8+"}x", make([]byte, 8)),
		"duplicate-name":       rawFile("{"+a8+","+tensorJSON("a", "F32", "[2]", 8, 16)+"}", make([]byte, 16)),
		"unknown-dtype":        rawFile("{"+tensorJSON("a", "BF16", "[4]", 0, 8)+"}", make([]byte, 8)),
		"negative-dim":         rawFile("{"+tensorJSON("a", "F32", "[-2]", 0, 8)+"}", make([]byte, 8)),
		"fractional-dim":       rawFile("{"+tensorJSON("a", "F32", "[2.5]", 0, 8)+"}", make([]byte, 8)),
		"shape-overflow":       rawFile("{"+tensorJSON("a", "I64", "[9223372036854775807,2]", 0, 8)+"}", make([]byte, 8)),
		"overlap":              rawFile("{"+a8+","+tensorJSON("b", "F32", "[2]", 4, 12)+"}", make([]byte, 12)),
		"gap":                  rawFile("{"+a8+","+tensorJSON("b", "F32", "[1]", 12, 16)+"}", make([]byte, 16)),
		"past-end":             rawFile("{"+a8+"}", make([]byte, 4)),
		"length-mismatch":      rawFile("{"+tensorJSON("a", "F32", "[3]", 0, 8)+"}", make([]byte, 8)),
		"metadata-not-string":  rawFile(`{"__metadata__":{"heterps.step":3}}`, nil),
	}
}

// TestFuzzCorpus checks that the valid seeds are accepted and the broken
// ones refused, and keeps the committed corpus in step with fuzzSeeds:
// `go test ./daemon/ckpt -run TestFuzzCorpus -args -update-corpus` rewrites it.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzRead")
	for name, data := range fuzzSeeds(t) {
		_, err := NewReader(bytes.NewReader(data), int64(len(data)), name)
		if valid := strings.HasPrefix(name, "valid"); valid != (err == nil) {
			t.Errorf("seed %s: valid %v, reader says %v", name, valid, err)
		}
		path := filepath.Join(dir, name)
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(data)))
		if *updateCorpus {
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != body {
			t.Errorf("seed %s is stale or missing (%v); run go test -run TestFuzzCorpus -update-corpus", path, err)
		}
	}
}

// FuzzManifest feeds arbitrary bytes to the manifest decoder: no panics, and
// an accepted manifest names only plain files of its own directory.
func FuzzManifest(f *testing.F) {
	sum := strings.Repeat("0f", 32)
	f.Add([]byte(`{"format_version":1,"job_id":"j","step":4,"shards":2,"files":[{"name":"shard-0.safetensors","size":10,"sha256":"` + sum + `"}]}`))
	f.Add([]byte(`{"format_version":1,"job_id":"j","step":4,"shards":1,"files":[{"name":"../x","size":1,"sha256":"` + sum + `"}]}`))
	f.Add([]byte(`{"format_version":1,"files":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeManifest(body)
		if err != nil {
			return
		}
		for _, e := range m.Files {
			if e.Name != filepath.Base(e.Name) || strings.ContainsAny(e.Name, `/\`) || e.Name == ".." || e.Name == ManifestName {
				t.Fatalf("accepted file name %q", e.Name)
			}
		}
		if m.Shards < 1 || m.Step < 0 || len(m.Files) == 0 {
			t.Fatalf("accepted %+v", m)
		}
	})
}
