package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// opener opens one kind of source with the given options.
type opener func(t *testing.T, opts Options) Source

func testSources(t *testing.T) map[string]opener {
	var svm strings.Builder
	for i := range 150 {
		fmt.Fprintf(&svm, "%d %d:1 %d:%d\n", i%2, 1+i%7, 10+i, i)
	}
	svmPath := writeFile(t, "s.svm", svm.String())
	file := func(open func(string, Options) (Source, error), path string) opener {
		return func(t *testing.T, opts Options) Source { return mustOpen(t, open, path, opts) }
	}
	return map[string]opener{
		"criteo": file(OpenCriteo, dataFile(t, "criteo_sample.csv")),
		"avazu":  file(OpenAvazu, dataFile(t, "avazu_sample.csv")),
		"digits": file(OpenDigits, dataFile(t, "digits.csv.gz")),
		"libsvm": file(OpenLibsvm, svmPath),
		"synthetic": func(t *testing.T, opts Options) Source {
			opts.Limit = 1000
			return newGenerator(t, 9, opts)
		},
		"regress": func(t *testing.T, opts Options) Source {
			opts.Limit = 1000
			return newRegress(t, DefaultRegress(9), opts)
		},
	}
}

// keys renders every sample of b.
func keys(b *Batch) []string {
	out := make([]string, b.Size)
	for i := range out {
		out[i] = sampleKey(b, i)
	}
	return out
}

func TestShardingIsDisjointAndCovering(t *testing.T) {
	const shards = 3
	for name, open := range testSources(t) {
		t.Run(name, func(t *testing.T) {
			full := keys(readAll(t, open(t, Options{})))
			total := 0
			for k := range shards {
				part := keys(readAll(t, open(t, Options{Shard: k, Shards: shards}), 17))
				total += len(part)
				for j, key := range part {
					if i := j*shards + k; key != full[i] {
						t.Fatalf("worker %d's sample %d is not record %d", k, j, i)
					}
				}
			}
			if total != len(full) {
				t.Fatalf("workers saw %d samples together, the data holds %d", total, len(full))
			}
		})
	}
}

func TestHoldOutSplitIsDisjointAndCovering(t *testing.T) {
	for name, open := range testSources(t) {
		t.Run(name, func(t *testing.T) {
			opts := Options{EvalFraction: 0.25}
			full := keys(readAll(t, open(t, opts)))
			opts.Split = SplitTrain
			train := keys(readAll(t, open(t, opts)))
			opts.Split = SplitEval
			eval := keys(readAll(t, open(t, opts)))
			if len(train)+len(eval) != len(full) || len(eval) == 0 {
				t.Fatalf("%d train + %d eval samples, %d in all", len(train), len(eval), len(full))
			}
			for i, key := range full {
				side := &train
				if IsEval(int64(i), 0.25) {
					side = &eval
				}
				if (*side)[0] != key {
					t.Fatalf("record %d is not where IsEval puts it", i)
				}
				*side = (*side)[1:]
			}
		})
	}
}

func TestIsEvalFraction(t *testing.T) {
	const n = 100000
	held := 0
	for i := range int64(n) {
		if IsEval(i, 0.1) {
			held++
		}
	}
	if held < 9500 || held > 10500 {
		t.Fatalf("%d of %d records held out at fraction 0.1", held, n)
	}
}

func TestBatchSizeMayChangeBetweenCalls(t *testing.T) {
	for name, open := range testSources(t) {
		t.Run(name, func(t *testing.T) {
			src := open(t, Options{})
			sizes := []int{1, 5, 64, 3, 200}
			total := 0
			for k := 0; ; k++ {
				size := sizes[k%len(sizes)]
				b, err := src.Next(context.Background(), size)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				total += b.Size
				if b.Size != size {
					// Only the last batch may be short.
					if _, err := src.Next(context.Background(), 1); !errors.Is(err, io.EOF) {
						t.Fatalf("batch %d: %d samples for size %d before the end", k, b.Size, size)
					}
					break
				}
			}
			if want := len(keys(readAll(t, open(t, Options{})))); total != want {
				t.Fatalf("read %d samples, the data holds %d", total, want)
			}
		})
	}
}

func TestLimitEndsTheStream(t *testing.T) {
	src := mustOpen(t, OpenCriteo, dataFile(t, "criteo_sample.csv"), Options{Limit: 30, Shard: 1, Shards: 2})
	if b := readAll(t, src, 4); b.Size != 15 {
		t.Fatalf("%d samples, want 15 (records 1, 3, ..., 29)", b.Size)
	}
}

func TestNextRejectsBadSizeAndCancelledContext(t *testing.T) {
	for name, open := range testSources(t) {
		src := open(t, Options{})
		if _, err := src.Next(context.Background(), 0); err == nil {
			t.Errorf("%s: size 0 accepted", name)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := src.Next(ctx, 10); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: cancelled context gave %v", name, err)
		}
	}
}

func TestOptionsErrors(t *testing.T) {
	bad := []Options{
		{Vocab: -1},
		{Shard: 2, Shards: 2},
		{Shard: -1},
		{EvalFraction: 1},
		{Split: Split(7)},
		{Limit: -5},
		{DenseDims: -1},
	}
	for _, opts := range bad {
		if _, err := OpenCriteo(dataFile(t, "criteo_sample.csv"), opts); err == nil {
			t.Errorf("options %+v accepted", opts)
		}
	}
}
