package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// measured is one side's figure, or why there is none.
type measured struct {
	samplesPerS float64
	loss        float64
	samples     float64 // trained in the timed part
	cpuSeconds  float64 // user + system CPU the processes spent on them, 0 if unknown
	err         error
}

// heterpsTools are the binaries built from this tree and the files
// `heterps run` needs.
type heterpsTools struct {
	heterps, heterpsd string
	dir               string
	catalog           string          // catalog file of psWorkers one-unit cpu-1t nodes
	cat               *config.Catalog // its contents
}

func buildHeterps(ctx context.Context, dir string, o options) (heterpsTools, error) {
	t := heterpsTools{heterps: filepath.Join(dir, "heterps"), dir: dir, catalog: filepath.Join(dir, "catalog.toml")}
	var err error
	if t.heterpsd, err = loopback.Build(ctx, dir); err != nil {
		return t, err
	}
	if t.cat, err = loopback.TypeCatalog(o.catalog, "cpu-1t", "paddle", psWorkers); err != nil {
		return t, err
	}
	text, err := t.cat.MarshalTOML()
	if err != nil {
		return t, fmt.Errorf("catalog: %w", err)
	}
	return t, os.WriteFile(t.catalog, text, 0o600)
}

// trainResult is the part of `heterps train --json` and `heterps run
// --json` the benchmark reads.
type trainResult struct {
	State       api.JobState `json:"state"` // heterps run only
	Reason      string       `json:"reason"`
	Steps       int64        `json:"steps"`
	Batch       int          `json:"batch"` // heterps train only
	Loss        float64      `json:"loss"`
	SamplesPerS float64      `json:"samples_per_s"`
}

// train is `heterps train` with threads kernel threads.
func (t heterpsTools) train(ctx context.Context, o options, threads int) measured {
	return t.command(ctx, o, o.batch, t.heterps, "train", "--model", modelName, "--data", dataSpec, "--steps", strconv.Itoa(o.steps),
		"--batch", strconv.Itoa(o.batch), "--threads", strconv.Itoa(threads), "--eval-samples", "0", "--json")
}

// run is `heterps run` of a job of batch samples a step on psWorkers
// one-thread nodes, its throughput floor the one that plans one stage on
// all of them.
func (t heterpsTools) run(ctx context.Context, o options, batch int) measured {
	limit, err := loopback.Limit(ctx, t.cat, modelName, dataSpec, psWorkers, batch, o.steps)
	if err != nil {
		return measured{err: err}
	}
	job := filepath.Join(t.dir, fmt.Sprintf("job-%d.toml", batch))
	text := fmt.Appendf(nil, "version = 1\nname = \"paddle-ps\"\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\nmode = \"bsp\"\nseed = 1\n",
		modelName, dataSpec, batch, o.steps, limit)
	if err := os.WriteFile(job, text, 0o600); err != nil {
		return measured{err: err}
	}
	return t.command(ctx, o, batch, t.heterps, "run", "--heterpsd", t.heterpsd, "--catalog", t.catalog, "--json", job)
}

// command runs a heterps command of batch samples a step that prints one
// JSON result.
func (t heterpsTools) command(ctx context.Context, o options, batch int, name string, args ...string) measured {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	// SIGTERM lets heterps run stop its daemons; SIGKILL would leave them.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r trainResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return measured{err: fmt.Errorf("heterps %s (%v) printed no result (%w): %s", args[0], runErr, err, tail(stderr.Bytes()))}
	}
	if runErr != nil || (r.State != "" && r.State != api.JobDone) {
		return measured{err: fmt.Errorf("heterps %s (%v): %s %s: %s", args[0], runErr, r.State, r.Reason, tail(stderr.Bytes()))}
	}
	// The whole command's CPU, start included; wait4 counts the node daemons
	// heterps run started and reaped.
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return measured{samplesPerS: r.SamplesPerS, loss: r.Loss, samples: float64(r.Steps) * float64(batch), cpuSeconds: cpu.Seconds()}
}

// tail is the end of a child's standard error, enough to say why it failed.
func tail(b []byte) string {
	const keep = 600
	b = bytes.TrimSpace(b)
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}
