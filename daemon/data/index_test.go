package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// smallMarks makes records marked every 8 for the test.
func smallMarks(t *testing.T) {
	old := indexEvery
	indexEvery = 8
	t.Cleanup(func() { indexEvery = old })
}

// criteoLines is the Criteo sample's header and rows with an empty line
// after every 7th row and CRLF endings on every 5th, so that line numbers,
// records and byte offsets all differ.
func criteoLines(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(dataFile(t, "criteo_sample.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		b.WriteString(l)
		if i%5 == 0 {
			b.WriteString("\r")
		}
		b.WriteString("\n")
		if i%7 == 0 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// scanned is how many lines src's reader has read.
func scanned(src Source) int64 { return src.(*fileSource).lines.scanned }

// TestAReaderStartsAtTheNearestMark: once a reader has read a file, a
// reader that starts at a record far into it moves to the nearest mark
// before that record instead of reading every line, and emits exactly what
// a reader of a copy of the file (same bytes, no marks) emits, for any
// start, shard and split.
func TestAReaderStartsAtTheNearestMark(t *testing.T) {
	smallMarks(t)
	content := criteoLines(t)
	path := writeFile(t, "criteo.csv", content)
	readAll(t, mustOpen(t, OpenCriteo, path, Options{}), 13) // notes the marks
	for _, start := range []int64{0, 5, 8, 17, 63, 64, 150, 199, 200, 260} {
		for _, o := range []Options{{}, {Shard: 1, Shards: 3}, {Split: SplitTrain, EvalFraction: 0.2}} {
			o.Start = start
			copyPath := writeFile(t, "copy.csv", content) // another inode: no marks
			got := mustOpen(t, OpenCriteo, path, o)
			want := mustOpen(t, OpenCriteo, copyPath, o)
			first, err := got.Next(context.Background(), 1)
			if start < 199 && err != nil {
				t.Fatalf("start %d %+v: %v", start, o, err)
			}
			if lines := scanned(got); start >= 16 && start < 200 && lines > 8+start%8+2 {
				t.Errorf("start %d %+v: %d lines read for the first record, want at most %d", start, o, lines, 8+start%8+2)
			}
			gotAll, wantAll := readAll(t, got, 7), readAll(t, want, 7)
			if first != nil {
				appendBatch(first, gotAll)
				gotAll = first
			}
			if gotAll.Size != wantAll.Size {
				t.Fatalf("start %d %+v: %d samples, want %d", start, o, gotAll.Size, wantAll.Size)
			}
			for i := range gotAll.Size {
				if sampleKey(gotAll, i) != sampleKey(wantAll, i) {
					t.Fatalf("start %d %+v: sample %d differs from the unmarked reader's", start, o, i)
				}
			}
		}
	}
}

// TestALineErrorPastAJumpNamesItsLine: a reader that moved to a mark
// counts lines from there as a reader from the start does.
func TestALineErrorPastAJumpNamesItsLine(t *testing.T) {
	smallMarks(t)
	lines := strings.Split(criteoLines(t), "\n")
	bad := 0
	for records, i := 0, 1; i < len(lines); i++ { // line 1 is the header
		if lines[i] == "" {
			continue
		}
		if records == 45 {
			lines[i], bad = "x"+lines[i][1:], i+1
			break
		}
		records++
	}
	path := writeFile(t, "bad.csv", strings.Join(lines, "\n"))
	readAll(t, mustOpen(t, OpenCriteo, path, Options{Limit: 40}), 13)
	src := mustOpen(t, OpenCriteo, path, Options{Start: 41})
	le := lineErrorOf(t, src)
	if le.Line != int64(bad) || scanned(src) > 12 {
		t.Fatalf("line %d after %d lines read, want line %d after at most 12: %v", le.Line, scanned(src), bad, le)
	}
}

// TestMarksOfAChangedFileAreNotUsed: a file rewritten in place is another
// file (its size or time changed); one changed behind its size and time
// is caught by its marks no longer starting lines, and read from the
// start.
func TestMarksOfAChangedFileAreNotUsed(t *testing.T) {
	smallMarks(t)
	original := criteoLines(t)
	path := writeFile(t, "criteo.csv", original)
	readAll(t, mustOpen(t, OpenCriteo, path, Options{}), 13)
	readsAsACopy := func(what, content string) {
		t.Helper()
		src := mustOpen(t, OpenCriteo, path, Options{Start: 100})
		got := readAll(t, src, 7)
		want := readAll(t, mustOpen(t, OpenCriteo, writeFile(t, "copy.csv", content), Options{Start: 100}), 7)
		if got.Size != want.Size || got.Size == 0 || sampleKey(got, 0) != sampleKey(want, 0) || sampleKey(got, got.Size-1) != sampleKey(want, want.Size-1) {
			t.Fatalf("%s: %d samples, want %d, or other samples", what, got.Size, want.Size)
		}
	}

	// Rewritten with a byte more on the first record's line: every later
	// line moves by a byte, and the size changes.
	header, rest, _ := strings.Cut(original, "\n")
	shifted := header + "\n0" + rest
	rewrite(t, path, shifted, time.Time{})
	readsAsACopy("rewritten", shifted) // also notes the rewritten file's marks
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}

	// Changed back to the original lines, a newline at the end keeping
	// the size, its time put back: the marks of the shifted file point a
	// byte into its lines.
	rewrite(t, path, original+"\n", fi.ModTime())
	readsAsACopy("changed behind its size and time", original+"\n")
}

// rewrite writes content into the file at path in place (the same inode)
// and, unless mtime is zero, sets its modification time back to mtime.
func rewrite(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if mtime.IsZero() {
		return
	}
	if err := os.Chtimes(path, time.Time{}, mtime); err != nil {
		t.Fatal(err)
	}
}

// TestAGzipFileIsReadWithoutMarks: a compressed file's offsets are not
// the file's, so its readers note no marks and read from the start.
func TestAGzipFileIsReadWithoutMarks(t *testing.T) {
	smallMarks(t)
	content := criteoLines(t)
	gz := writeGzip(t, "criteo.csv.gz", content)
	readAll(t, mustOpen(t, OpenCriteo, gz, Options{}), 13)
	src := mustOpen(t, OpenCriteo, gz, Options{Start: 100})
	got := readAll(t, src, 7)
	want := readAll(t, mustOpen(t, OpenCriteo, writeFile(t, "plain.csv", content), Options{Start: 100}), 7)
	if src.(*fileSource).index != nil || got.Size != want.Size || sampleKey(got, 0) != sampleKey(want, 0) {
		t.Fatalf("gzip: marked %t, %d samples, want %d", src.(*fileSource).index != nil, got.Size, want.Size)
	}
}

// TestSkipBatchesMovesToMarks: a restored reader passing over the batches
// trained (SkipBatches) moves to the marks its process noted, within a
// pass and across its end, and goes on with the batches a reader of an
// unmarked copy goes on with.
func TestSkipBatchesMovesToMarks(t *testing.T) {
	smallMarks(t)
	content := criteoLines(t)
	path := writeFile(t, "criteo.csv", content)
	readAll(t, mustOpen(t, OpenCriteo, path, Options{}), 13)
	open := func(p string, o Options) Source {
		src, err := Repeat(func() (Source, error) { return OpenCriteo(p, o) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		return src
	}
	for _, n := range []int64{1, 3, 12, 14, 15, 20, 33} { // a pass of shard 1 of 2 holds 15 batches of 7
		for _, o := range []Options{{Shard: 1, Shards: 2}, {Split: SplitTrain, EvalFraction: 0.3}, {Start: 30}} {
			got, want := open(path, o), open(writeFile(t, "copy.csv", content), o) // a fresh copy has no marks
			if err := SkipBatches(context.Background(), got, n, 7); err != nil {
				t.Fatalf("%d batches %+v: %v", n, o, err)
			}
			if err := SkipBatches(context.Background(), want, n, 7); err != nil {
				t.Fatal(err)
			}
			if n == 12 && o.Shards == 2 {
				if lines := scanned(got.(*repeating).cur); lines > 2+8+2*7 {
					t.Errorf("12 batches of shard 1 of 2: %d lines read, want at most %d", lines, 2+8+2*7)
				}
			}
			for k := range 3 {
				g, err1 := got.Next(context.Background(), 7)
				w, err2 := want.Next(context.Background(), 7)
				if err1 != nil || err2 != nil || g.Size != w.Size {
					t.Fatalf("%d batches %+v, batch %d after: %v, %v", n, o, k, err1, err2)
				}
				for i := range g.Size {
					if sampleKey(g, i) != sampleKey(w, i) {
						t.Fatalf("%d batches %+v: batch %d after differs at sample %d", n, o, k, i)
					}
				}
			}
		}
	}
}

// TestReadersShareMarksSafely: readers of one file in one process — a
// node's replicas, a segment opened while the last is read — note and use
// its marks at once (run under -race), each reading what an unmarked
// reader reads.
func TestReadersShareMarksSafely(t *testing.T) {
	smallMarks(t)
	content := criteoLines(t)
	path := writeFile(t, "criteo.csv", content)
	want := map[int64]*Batch{}
	for _, start := range []int64{0, 40, 90, 150} {
		want[start] = readAll(t, mustOpen(t, OpenCriteo, writeFile(t, "copy.csv", content), Options{Start: start}), 7)
	}
	errs := make(chan string, 4*len(want))
	var wg sync.WaitGroup
	for range 4 {
		for start, w := range want {
			wg.Go(func() {
				src, err := OpenCriteo(path, Options{Start: start})
				if err != nil {
					errs <- err.Error()
					return
				}
				defer src.Close()
				got := newBatch(src.Schema(), 0, false)
				for {
					b, err := src.Next(context.Background(), 7)
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						errs <- err.Error()
						return
					}
					appendBatch(got, b)
				}
				if got.Size != w.Size || (got.Size > 0 && sampleKey(got, 0) != sampleKey(w, 0)) {
					errs <- fmt.Sprintf("start %d: %d samples, want %d", start, got.Size, w.Size)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
