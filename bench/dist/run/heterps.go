package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// tools are the binaries the default mode runs.
type tools struct{ heterps, heterpsd string }

// buildTools builds heterps and heterpsd from this tree into dir; it must
// run from the repository root.
func buildTools(ctx context.Context, dir string) (tools, error) {
	t := tools{heterps: filepath.Join(dir, "heterps"), heterpsd: filepath.Join(dir, "heterpsd")}
	for _, b := range []struct{ out, pkg string }{{t.heterps, "./tools/heterps"}, {t.heterpsd, "./daemon/cmd/heterpsd"}} {
		out, err := exec.CommandContext(ctx, "go", "build", "-o", b.out, b.pkg).CombinedOutput()
		if err != nil {
			return t, fmt.Errorf("go build %s (run this from the repository root): %w\n%s", b.pkg, err, out)
		}
	}
	return t, nil
}

// runResult is the part of `heterps run --json`'s output the benchmark
// reads.
type runResult struct {
	State       api.JobState      `json:"state"`
	Reason      string            `json:"reason"`
	Steps       int64             `json:"steps"` // completed
	Loss        float64           `json:"loss"`
	SamplesPerS float64           `json:"samples_per_s"`
	Seconds     float64           `json:"seconds"` // from the job's start to its finish
	Stages      []api.StageStatus `json:"stages"`
}

// heterpsRun returns a distributor that runs each job with `heterps run`,
// writing its catalog and job files into dir.
func (t tools) heterpsRun(dir string) distributor {
	return func(ctx context.Context, cat *config.Catalog, job []byte, n int) (*outcome, error) {
		catPath := filepath.Join(dir, fmt.Sprintf("catalog-%d.toml", n))
		jobPath := filepath.Join(dir, fmt.Sprintf("job-%d.toml", n))
		catTOML, err := cat.MarshalTOML()
		if err != nil {
			return nil, fmt.Errorf("catalog: %w", err)
		}
		if err := os.WriteFile(catPath, catTOML, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(jobPath, job, 0o600); err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, t.heterps, "run", "--heterpsd", t.heterpsd, "--catalog", catPath, "--json", jobPath)
		// On a timeout or an interrupt, SIGTERM lets heterps run cancel the
		// job and stop its daemons; SIGKILL would leave them running.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 30 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		begin := time.Now()
		runErr := cmd.Run()
		wall := time.Since(begin).Seconds()
		var r runResult
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("heterps run (%v) printed no result (%w):\n%s", runErr, err, tail(stderr.Bytes()))
		}
		if r.State != api.JobDone || runErr != nil {
			return nil, fmt.Errorf("heterps run (%v): job %s: %s\n%s", runErr, r.State, r.Reason, tail(stderr.Bytes()))
		}
		return &outcome{samplesPerS: r.SamplesPerS, steps: r.Steps, jobSeconds: r.Seconds, wallSeconds: wall,
			loss: r.Loss, stages: r.Stages}, nil
	}
}

// tail is the end of a child's standard error, enough to show why it
// failed (heterps run names the directory of the daemons' logs last).
func tail(b []byte) []byte {
	const keep = 2000
	if len(b) > keep {
		return b[len(b)-keep:]
	}
	return b
}
