package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"

	"github.com/heterps/heterps/bench/internal/heterpsbin"
	"github.com/heterps/heterps/bench/internal/stats"
)

// makeRunJob is the job `make run` submits.
const makeRunJob = "config/examples/jobs/ctrdnn-local.toml"

// makeRunOptions are the flags of the make-run block.
type makeRunOptions struct {
	steps   int // the job's steps, in place of its file's; 0 skips the block
	repeats int // runs of each side, interleaved; the best counts
}

// makeRunBlock measures `make run`'s job shape against `heterps train` in
// the same run: the job file as `make run` submits it (catalog local: one
// stage of one cpu-2t unit, its PS shard on the same node, batch 512) but
// with o.steps steps so that start-up does not dominate, and `heterps
// train --model ctrdnn` on the same data, batch and steps with the
// machine's threads. The two alternate, o.repeats rounds of one run each,
// every other round the job first so that a host slowing down or speeding
// up within a round favours neither; each side's best counts, and the
// median of the rounds' ratios is printed beside the ratio of the bests.
func makeRunBlock(ctx context.Context, o makeRunOptions, w io.Writer) error {
	dir, err := os.MkdirTemp("", "bench-dist-makerun-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t, err := buildTools(ctx, dir)
	if err != nil {
		return err
	}
	job, err := makeRunJobFile(makeRunJob, dir, o.steps)
	if err != nil {
		return err
	}
	best, all, err := alternateSides(o.repeats, []side{
		{"heterps train", func() (*heterpsbin.Result, error) { return t.trainCtrdnn(ctx, o.steps) }},
		{"heterps run " + makeRunJob, func() (*heterpsbin.Result, error) { return t.runJobFile(ctx, job) }},
	})
	if err != nil {
		return err
	}
	train, run := best[0], best[1]
	fmt.Fprintf(w, "\n== make run's job: %s at %d steps (catalog local), against heterps train --model ctrdnn, %d threads; best of %d each, alternating\n",
		makeRunJob, o.steps, runtime.NumCPU(), o.repeats)
	fmt.Fprintf(w, "heterps train:  %8.0f samples/s, loss %.4f (runs %s)\n", train.SamplesPerS, train.Loss, stats.Rates(all[0]))
	fmt.Fprintf(w, "heterps run:    %8.0f samples/s measured, %8.0f over the job (incl. start), %.2fx heterps train (%.2fx: the median of the rounds' ratios), loss %.4f (runs %s)\n",
		run.SamplesPerS, float64(run.Steps*int64(makeRunBatch))/run.Seconds, run.SamplesPerS/train.SamplesPerS,
		roundsRatio(all[1], all[0]), run.Loss, stats.Rates(all[1]))
	for _, st := range run.Stages {
		fmt.Fprintf(w, "  stage %d: %d x %s, dense_sync %s\n", st.Stage, st.Units, st.Type, st.DenseSync)
	}
	return nil
}

// side is one program the make-run block times.
type side struct {
	name string
	run  func() (*heterpsbin.Result, error)
}

// alternateSides runs each side once a round for rounds rounds, in order
// in even rounds and in reverse in odd ones (A B, B A, A B, ...), so that
// a host slowing down or speeding up within a round favours neither. It
// returns each side's fastest run and every run's samples/s in the order
// run, and stops at the first failure, naming the side.
func alternateSides(rounds int, sides []side) (best []*heterpsbin.Result, all [][]float64, err error) {
	best, all = make([]*heterpsbin.Result, len(sides)), make([][]float64, len(sides))
	for round := range rounds {
		for k := range sides {
			i := k
			if round%2 == 1 {
				i = len(sides) - 1 - k
			}
			r, err := sides[i].run()
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", sides[i].name, err)
			}
			all[i] = append(all[i], r.SamplesPerS)
			if best[i] == nil || r.SamplesPerS > best[i].SamplesPerS {
				best[i] = r
			}
		}
	}
	return best, all, nil
}

// makeRunBatch is the batch of makeRunJob (checked by makeRunJobFile).
const makeRunBatch = 512

var (
	stepsLine = regexp.MustCompile(`(?m)^steps\s*=\s*\d+`)
	batchLine = regexp.MustCompile(`(?m)^batch\s*=\s*(\d+)`)
)

// makeRunJobFile writes the job file src (makeRunJob) with steps steps
// into dir and returns its path.
func makeRunJobFile(src, dir string, steps int) (string, error) {
	raw, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("%w (run this from the repository root)", err)
	}
	if m := batchLine.FindSubmatch(raw); m == nil || string(m[1]) != strconv.Itoa(makeRunBatch) {
		return "", fmt.Errorf("%s: want batch = %d", src, makeRunBatch)
	}
	if !stepsLine.Match(raw) {
		return "", fmt.Errorf("%s: no steps line", src)
	}
	path := filepath.Join(dir, "make-run-job.toml")
	return path, os.WriteFile(path, stepsLine.ReplaceAll(raw, fmt.Appendf(nil, "steps = %d", steps)), 0o600)
}

// runJobFile runs job with `heterps run` on the built-in local catalog,
// as `make run` does.
func (t tools) runJobFile(ctx context.Context, job string) (*heterpsbin.Result, error) {
	return t.Run(ctx, "local", job)
}

// trainCtrdnn trains ctrdnn single-process with `heterps train` on the
// job's data and batch.
func (t tools) trainCtrdnn(ctx context.Context, steps int) (*heterpsbin.Result, error) {
	var r struct {
		Loss        float64 `json:"loss"`
		SamplesPerS float64 `json:"samples_per_s"`
	}
	err := t.JSON(ctx, &r, "train", "--model", modelName, "--data", dataSpec, "--steps", strconv.Itoa(steps),
		"--batch", strconv.Itoa(makeRunBatch), "--threads", strconv.Itoa(runtime.NumCPU()), "--eval-samples", "512", "--json")
	if err != nil {
		return nil, err
	}
	return &heterpsbin.Result{Loss: r.Loss, SamplesPerS: r.SamplesPerS}, nil
}
