package data

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dataFile finds a real data file: in the shared folder beside the checkout
// when it is there, else in the copy under testdata.
func dataFile(t *testing.T, name string) string {
	t.Helper()
	shared := filepath.Join("..", "..", "..", "shared", "data", name)
	if _, err := os.Stat(shared); err == nil {
		return shared
	}
	return filepath.Join("testdata", name)
}

// readLines returns a text file's lines (gunzipped when needed).
func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	var lines []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// writeFile writes content into a fresh temporary file and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeGzip(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	if _, err := gz.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(gz.Close(), f.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// readAll drains src in batches of the given sizes (cycling through them),
// checks every batch against the schema and joins them into one batch.
func readAll(t *testing.T, src Source, sizes ...int) *Batch {
	t.Helper()
	if len(sizes) == 0 {
		sizes = []int{64}
	}
	all := newBatch(src.Schema(), 0, false)
	for k := 0; ; k++ {
		size := sizes[k%len(sizes)]
		b, err := src.Next(context.Background(), size)
		if errors.Is(err, io.EOF) {
			return all
		}
		if err != nil {
			t.Fatalf("batch %d: %v", k, err)
		}
		if err := b.Validate(src.Schema()); err != nil {
			t.Fatalf("batch %d: %v", k, err)
		}
		if b.Probs != nil && all.Probs == nil {
			all.Probs = []float32{}
		}
		if b.Size > size {
			t.Fatalf("batch %d: %d samples, asked for %d", k, b.Size, size)
		}
		appendBatch(all, b)
	}
}

func appendBatch(dst, b *Batch) {
	for i := range b.Size {
		dst.add(sampleRecord(b, i))
	}
}

// sampleRecord copies sample i of b into a record.
func sampleRecord(b *Batch, i int) *record {
	r := &record{dense: b.Dense[i*b.NumDense : (i+1)*b.NumDense], label: b.Labels[i]}
	for s := range b.Slots {
		r.ids = append(r.ids, b.Bag(i, s)...)
		r.endBag()
	}
	if b.Classes != nil {
		r.class = b.Classes[i]
	}
	if b.Probs != nil {
		r.prob = b.Probs[i]
	}
	return r
}

// sampleKey renders sample i of b, to compare samples across batches.
func sampleKey(b *Batch, i int) string {
	r := sampleRecord(b, i)
	return fmt.Sprint(r.label, r.class, r.prob, r.dense, r.ids, r.bagEnd)
}

func mustOpen(t *testing.T, open func(string, Options) (Source, error), path string, opts Options) Source {
	t.Helper()
	src, err := open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// lineErrorOf drains src and returns the LineError that stops it.
func lineErrorOf(t *testing.T, src Source) *LineError {
	t.Helper()
	for {
		_, err := src.Next(context.Background(), 50)
		if errors.Is(err, io.EOF) {
			t.Fatal("stream ended without an error")
		}
		var le *LineError
		if errors.As(err, &le) {
			return le
		}
		if err != nil {
			t.Fatalf("error %v is not a *LineError", err)
		}
	}
}
