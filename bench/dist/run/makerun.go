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
// machine's threads. The two alternate, o.repeats times each; each side's
// best counts.
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
	var train, run *heterpsbin.Result
	for range o.repeats {
		tr, err := t.trainCtrdnn(ctx, o.steps)
		if err != nil {
			return fmt.Errorf("heterps train: %w", err)
		}
		if train == nil || tr.SamplesPerS > train.SamplesPerS {
			train = tr
		}
		r, err := t.runJobFile(ctx, job)
		if err != nil {
			return fmt.Errorf("heterps run %s: %w", makeRunJob, err)
		}
		if run == nil || r.SamplesPerS > run.SamplesPerS {
			run = r
		}
	}
	fmt.Fprintf(w, "\n== make run's job: %s at %d steps (catalog local), against heterps train --model ctrdnn, %d threads; best of %d each, alternating\n",
		makeRunJob, o.steps, runtime.NumCPU(), o.repeats)
	fmt.Fprintf(w, "heterps train:  %8.0f samples/s, loss %.4f\n", train.SamplesPerS, train.Loss)
	fmt.Fprintf(w, "heterps run:    %8.0f samples/s measured, %8.0f over the job (incl. start), %.2fx heterps train, loss %.4f\n",
		run.SamplesPerS, float64(run.Steps*int64(makeRunBatch))/run.Seconds, run.SamplesPerS/train.SamplesPerS, run.Loss)
	for _, st := range run.Stages {
		fmt.Fprintf(w, "  stage %d: %d x %s, dense_sync %s\n", st.Stage, st.Units, st.Type, st.DenseSync)
	}
	return nil
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
