// Package heterpsbin builds heterps and heterpsd from this tree and runs
// jobs with `heterps run`, for the benchmarks that measure the real
// binaries (a coordinator and one heterpsd process per node) rather than
// in-process clusters.
package heterpsbin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// Tools are the paths of the built binaries.
type Tools struct{ Heterps, Heterpsd string }

// Build builds heterps and heterpsd from this tree into dir; it must run
// from the repository root.
func Build(ctx context.Context, dir string) (Tools, error) {
	t := Tools{Heterps: filepath.Join(dir, "heterps"), Heterpsd: filepath.Join(dir, "heterpsd")}
	for _, b := range []struct{ out, pkg string }{{t.Heterps, "./tools/heterps"}, {t.Heterpsd, "./daemon/cmd/heterpsd"}} {
		out, err := exec.CommandContext(ctx, "go", "build", "-o", b.out, b.pkg).CombinedOutput()
		if err != nil {
			return t, fmt.Errorf("go build %s (run this from the repository root): %w\n%s", b.pkg, err, out)
		}
	}
	return t, nil
}

// Result is the part of `heterps run --json`'s output the benchmarks read.
type Result struct {
	State       api.JobState      `json:"state"`
	Reason      string            `json:"reason"`
	Steps       int64             `json:"steps"` // completed
	Loss        float64           `json:"loss"`
	SamplesPerS float64           `json:"samples_per_s"`
	Seconds     float64           `json:"seconds"` // from the job's start to its finish
	Stages      []api.StageStatus `json:"stages"`
}

// Run runs the job file with `heterps run --json` on the catalog (a file
// or a built-in name) and returns its result; a job that did not end done
// is an error with the end of heterps run's standard error.
func (t Tools) Run(ctx context.Context, catalog, jobPath string) (*Result, error) {
	var r Result
	err := t.JSON(ctx, &r, "run", "--heterpsd", t.Heterpsd, "--catalog", catalog, "--json", jobPath)
	if err == nil && r.State != api.JobDone {
		err = fmt.Errorf("heterps run: job %s: %s", r.State, r.Reason)
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// JSON runs heterps with args and decodes what it prints into out. On a
// timeout or an interrupt the child gets SIGTERM, which lets heterps run
// cancel its job and stop its daemons (SIGKILL would leave them running).
func (t Tools) JSON(ctx context.Context, out any, args ...string) error {
	cmd := exec.CommandContext(ctx, t.Heterps, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil || runErr != nil {
		return fmt.Errorf("heterps %s: %v (output: %v):\n%s", args[0], runErr, err, Tail(stderr.Bytes()))
	}
	return nil
}

// Tail is the end of a child's standard error, enough to show why it
// failed (heterps run names the directory of the daemons' logs last).
func Tail(b []byte) []byte {
	const keep = 2000
	if len(b) > keep {
		return b[len(b)-keep:]
	}
	return b
}
