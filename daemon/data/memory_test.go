package data

import (
	"context"
	"strings"
	"testing"
)

// bigCriteo writes the Criteo sample's rows repeated to n lines of raw TSV.
func bigCriteo(t *testing.T, n int, gzipped bool) string {
	t.Helper()
	rows := readLines(t, dataFile(t, "criteo_sample.csv"))[1:]
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.ReplaceAll(rows[i%len(rows)], ",", "\t"))
		b.WriteByte('\n')
	}
	if gzipped {
		return writeGzip(t, "big.gz", b.String())
	}
	return writeFile(t, "big.tsv", b.String())
}

// allocsPerBatch measures the allocations of one Next call of the given size
// on a source that has enough lines left for every call.
func allocsPerBatch(t *testing.T, path string, size int) float64 {
	src := mustOpen(t, OpenCriteo, path, Options{})
	ctx := context.Background()
	return testing.AllocsPerRun(10, func() {
		if _, err := src.Next(ctx, size); err != nil {
			t.Fatal(err)
		}
	})
}

// The readers stream: reading a line allocates nothing, so a batch of a plain
// file costs the same few allocations (the batch itself) whatever its size.
func TestReadingDoesNotAllocatePerLine(t *testing.T) {
	path := bigCriteo(t, 20000, false)
	small, large := allocsPerBatch(t, path, 16), allocsPerBatch(t, path, 1024)
	if large != small || large > 8 {
		t.Errorf("%.1f allocations per 16-sample batch, %.1f per 1024-sample batch", small, large)
	}
}

// Through gzip, compress/flate allocates its Huffman tables once per
// compressed block (tens of kilobytes), still far less than once a line.
func TestReadingGzipAllocatesPerBlockNotPerLine(t *testing.T) {
	path := bigCriteo(t, 20000, true)
	const size = 1024
	if perLine := allocsPerBatch(t, path, size) / size; perLine > 0.1 {
		t.Errorf("%.3f allocations per line through gzip", perLine)
	}
}

func TestGeneratorDoesNotAllocatePerSample(t *testing.T) {
	g := newGenerator(t, 4, Options{})
	ctx := context.Background()
	per := func(size int) float64 {
		return testing.AllocsPerRun(10, func() {
			if _, err := g.Next(ctx, size); err != nil {
				t.Fatal(err)
			}
		})
	}
	if small, large := per(16), per(1024); large != small || large > 8 {
		t.Errorf("%.1f allocations per 16-sample batch, %.1f per 1024-sample batch", small, large)
	}
}
