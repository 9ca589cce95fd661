package data

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// TestSkipBatchesLandsWhereNextWould: skipping n batches of a repeated
// file without decoding them leaves the reader where n calls of Next
// would — within the first pass, across a pass's short last batch, and
// many passes on (read twice at most) — for several shards, with a header
// (Avazu) and without (Criteo); and it says which pass it is in.
func TestSkipBatchesLandsWhereNextWould(t *testing.T) {
	for _, f := range []struct {
		name string
		open func(string, Options) (Source, error)
		file string
	}{{"criteo", OpenCriteo, "criteo_sample.csv"}, {"avazu", OpenAvazu, "avazu_sample.csv"}} {
		path := dataFile(t, f.file)
		for _, shards := range []int{1, 3} {
			opts := Options{Shard: shards - 1, Shards: shards}
			open := func() (Source, error) { return f.open(path, opts) }
			for _, n := range []int64{0, 1, 7, 40, 41, 1000} {
				for _, size := range []int{1, 16, 60} {
					want, wantEpoch := afterNext(t, open, n, size)
					var epoch int
					src, err := RepeatEpochs(open, func(e int) { epoch = e })
					if err != nil {
						t.Fatal(err)
					}
					if err := src.(BatchSkipper).SkipBatches(context.Background(), n, size); err != nil {
						t.Fatalf("%s shard %d/%d: skip %d of %d: %v", f.name, opts.Shard, shards, n, size, err)
					}
					got, err := src.Next(context.Background(), size)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) || max(epoch, 1) != wantEpoch {
						t.Errorf("%s shard %d/%d, %d batches of %d skipped: next batch of %d samples in pass %d, reading gives %d in pass %d",
							f.name, opts.Shard, shards, n, size, got.Size, max(epoch, 1), want.Size, wantEpoch)
					}
					src.Close()
				}
			}
		}
	}
}

// afterNext is the batch after n batches of size read with Next, and the
// pass it is in.
func afterNext(t *testing.T, open func() (Source, error), n int64, size int) (*Batch, int) {
	t.Helper()
	epoch := 1
	src, err := RepeatEpochs(open, func(e int) { epoch = e })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for range n + 1 {
		b, err := src.Next(context.Background(), size)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return b, epoch
		}
		n--
	}
	t.Fatal("unreachable")
	return nil, 0
}

// TestSkipBatchesDecodesWhereBadLinesAreSkipped: a source that skips
// malformed lines cannot tell them without decoding, so it skips by
// reading, and lands where reading does.
func TestSkipBatchesDecodesWhereBadLinesAreSkipped(t *testing.T) {
	lines := readLines(t, dataFile(t, "criteo_sample.csv"))
	lines[3] = "not a record"
	path := writeFile(t, "bad.csv", strings.Join(lines, "\n")+"\n")
	open := func() (Source, error) { return OpenCriteo(path, Options{SkipBadLines: true}) }
	want, _ := afterNext(t, open, 5, 16)
	src, err := Repeat(open)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.(BatchSkipper).SkipBatches(context.Background(), 5, 16); err != nil {
		t.Fatal(err)
	}
	got, err := src.Next(context.Background(), 16)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("after skipping 5 batches past a bad line: %v, batch equal to reading's: %v", err, reflect.DeepEqual(got, want))
	}
}

// TestDecodedSkipsReadOnePass: where bad lines are skipped (the batches
// must be decoded), a skip over many passes decodes the first pass to
// count its batches and then only the batches left of the last, landing
// where reading does, in the same pass; reading opens the file once a
// pass.
func TestDecodedSkipsReadOnePass(t *testing.T) {
	lines := readLines(t, dataFile(t, "criteo_sample.csv"))
	lines[3] = "not a record"
	path := writeFile(t, "bad.csv", strings.Join(lines, "\n")+"\n")
	opens := 0
	open := func() (Source, error) { opens++; return OpenCriteo(path, Options{SkipBadLines: true}) }
	for _, n := range []int64{3, 13, 14, 15, 40, 137} { // a pass of 199 records holds 13 batches of 16
		want, wantEpoch := afterNext(t, open, n, 16)
		opens = 0
		epoch := 1
		src, err := RepeatEpochs(open, func(e int) { epoch = e })
		if err != nil {
			t.Fatal(err)
		}
		if err := src.(BatchSkipper).SkipBatches(context.Background(), n, 16); err != nil {
			t.Fatal(err)
		}
		got, err := src.Next(context.Background(), 16)
		if err != nil || !reflect.DeepEqual(got, want) || epoch != wantEpoch {
			t.Errorf("%d batches: next batch equal to reading's %v (%v), pass %d, want %d", n, reflect.DeepEqual(got, want), err, epoch, wantEpoch)
		}
		if opens > 3 {
			t.Errorf("%d batches: the file opened %d times, want at most 3 (the first pass, and those left of the last)", n, opens)
		}
		src.Close()
	}
}
