// Command datastart measures how long a reader of a Criteo file takes to
// deliver its first batch when it starts far into the file, as a stage-0
// replica does at every data segment (a change of its stage's replicas or
// batches: the dynamic batch controller's adjustments, an elastic shrink
// or grow): with the record marks its process noted while reading the file
// (heterps today) and without them (a reader of a copy of the same bytes,
// as every reader was before the marks: it passes over every line before
// its start).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

func main() {
	native.FixOpenBLASCore() // the header names the kernels heterps runs with
	records := flag.Int64("records", 2_000_000, "records in the generated Criteo file (the repository's 200-row sample, repeated)")
	sample := flag.String("sample", "daemon/data/testdata/criteo_sample.csv", "the Criteo sample the file repeats (run from the repository root)")
	rounds := flag.Int("rounds", 3, "measurements of each reader (the best is printed)")
	outPath := flag.String("out", "", header.OutUsage)
	flag.Parse()
	if err := run(*records, *sample, *rounds, *outPath); err != nil {
		fmt.Fprintln(os.Stderr, "bench/datastart:", err)
		os.Exit(1)
	}
}

func run(records int64, sample string, rounds int, outPath string) error {
	res, err := header.Begin(outPath, header.Collect("bench/datastart"))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-datastart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	marked, size, err := writeCriteo(filepath.Join(dir, "criteo.csv"), sample, records)
	if err != nil {
		return err
	}
	fmt.Fprintf(res, "bench/datastart: a Criteo CSV of %d records (%.0f MB, the page cache warm), batch 512, shard 1 of 2, training split\n",
		records, float64(size)/1e6)
	pass, err := firstPass(marked)
	if err != nil {
		return err
	}
	fmt.Fprintf(res, "the first pass over the file (which notes the marks): %.2f s, %.0f MB/s\n", pass.Seconds(), float64(size)/1e6/pass.Seconds())
	fmt.Fprintf(res, "first batch of a reader that starts at a record far into the file: with the marks (best of %d) and without\n", rounds)
	fmt.Fprintf(res, "(a fresh copy of the file, read once: every reader before the marks)\n")
	fmt.Fprintf(res, "%10s %14s %18s %8s\n", "start", "marks (ms)", "no marks (ms)", "ratio")
	for _, frac := range []float64{0.1, 0.5, 0.9} {
		start := int64(frac * float64(records))
		with, err := best(rounds, func() error { return firstBatch(marked, start) })
		if err != nil {
			return err
		}
		// A reader without marks notes them as it reads: each gets a
		// fresh copy, read once.
		unmarked, _, err := writeCriteo(filepath.Join(dir, fmt.Sprintf("copy-%g.csv", frac)), sample, records)
		if err != nil {
			return err
		}
		without, err := best(1, func() error { return firstBatch(unmarked, start) })
		if err != nil {
			return err
		}
		os.Remove(strings.TrimPrefix(unmarked, "criteo:"))
		fmt.Fprintf(res, "%9.0f%% %14.2f %18.2f %7.0fx\n", 100*frac, ms(with), ms(without), without.Seconds()/with.Seconds())
	}
	fmt.Fprintf(res, "a restored replica passing over the batches its stage trained (data.SkipBatches, shard 1 of 2, 90 %% of a pass), then reading one:\n")
	steps := int64(0.9 * (1 - data.DefaultEvalFraction) * float64(records) / 2 / 512) // the shard keeps half the training split
	with, err := best(rounds, func() error { return skipTrained(marked, steps) })
	if err != nil {
		return err
	}
	unmarked, _, err := writeCriteo(filepath.Join(dir, "copy-restore.csv"), sample, records)
	if err != nil {
		return err
	}
	without, err := best(1, func() error { return skipTrained(unmarked, steps) })
	if err != nil {
		return err
	}
	fmt.Fprintf(res, "%10s %14.2f %18.2f %7.0fx\n", fmt.Sprintf("%d steps", steps), ms(with), ms(without), without.Seconds()/with.Seconds())
	return res.Close()
}

// skipTrained passes over steps batches of 512 of shard 1 of 2 from the
// start of spec, as a restored stage-0 replica does, and reads the next.
func skipTrained(spec string, steps int64) error {
	src, err := data.Repeat(func() (data.Source, error) {
		return data.Open(spec, data.Options{Shard: 1, Shards: 2, Split: data.SplitTrain})
	})
	if err != nil {
		return err
	}
	defer src.Close()
	if err := data.SkipBatches(context.Background(), src, steps, 512); err != nil {
		return err
	}
	_, err = src.Next(context.Background(), 512)
	return err
}

// writeCriteo writes records rows of sample (its header first) to path and
// returns the spec that reads it and the file's size.
func writeCriteo(path, sample string, records int64) (string, int64, error) {
	raw, err := os.ReadFile(sample)
	if err != nil {
		return "", 0, err
	}
	head, body, ok := strings.Cut(strings.TrimSpace(string(raw)), "\n")
	if !ok {
		return "", 0, fmt.Errorf("%s: no rows", sample)
	}
	rows := strings.Split(body, "\n")
	f, err := os.Create(path)
	if err != nil {
		return "", 0, err
	}
	var b strings.Builder
	b.WriteString(head + "\n")
	for i := range records {
		b.WriteString(rows[i%int64(len(rows))])
		b.WriteByte('\n')
		if b.Len() > 1<<20 {
			if _, err := io.WriteString(f, b.String()); err != nil {
				f.Close()
				return "", 0, err
			}
			b.Reset()
		}
	}
	if _, err := io.WriteString(f, b.String()); err != nil {
		f.Close()
		return "", 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return "", 0, err
	}
	return "criteo:" + path, fi.Size(), f.Close()
}

// firstPass reads the whole file once, as a stage does before any change.
func firstPass(spec string) (time.Duration, error) {
	t0 := time.Now()
	src, err := data.Open(spec, data.Options{Shard: 0, Shards: 2, Split: data.SplitTrain})
	if err != nil {
		return 0, err
	}
	defer src.Close()
	for {
		if _, err := src.Next(context.Background(), 4096); err == io.EOF {
			return time.Since(t0), nil
		} else if err != nil {
			return 0, err
		}
	}
}

// firstBatch opens spec's shard 1 of 2 at record start and reads one
// batch of 512, as a stage-0 replica does at a new data segment.
func firstBatch(spec string, start int64) error {
	src, err := data.Open(spec, data.Options{Shard: 1, Shards: 2, Split: data.SplitTrain, Start: start})
	if err != nil {
		return err
	}
	defer src.Close()
	b, err := src.Next(context.Background(), 512)
	if err != nil {
		return err
	}
	if b.Size != 512 {
		return fmt.Errorf("start %d: %d samples, want 512", start, b.Size)
	}
	return nil
}

func best(rounds int, f func() error) (time.Duration, error) {
	var fastest time.Duration
	for r := range max(rounds, 1) {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		if d := time.Since(t0); r == 0 || d < fastest {
			fastest = d
		}
	}
	return fastest, nil
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }
