// Package heterpsrun runs heterps, built from this tree, as one side of a
// benchmark against another system: `heterps train` in one process and
// `heterps run` on one-unit loopback nodes (a coordinator and one heterpsd
// per node), each reading the command's one JSON result.
package heterpsrun

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

// Result is one heterps command's figures.
type Result struct {
	SamplesPerS float64
	Loss        float64
	Samples     float64 // trained, start excluded
	CPUSeconds  float64 // user + system CPU of the whole command, its node daemons included
}

// Tools are the binaries built from this tree and the catalog of one-unit
// nodes that `heterps run` starts.
type Tools struct {
	Heterps, Heterpsd string
	Dir               string
	CatalogPath       string
	Catalog           *config.Catalog
	Timeout           time.Duration // of one command
}

// Build builds heterps and heterpsd into dir and writes a catalog named
// name of nodes one-unit nodes of catalogPath's type unitType.
func Build(ctx context.Context, dir, catalogPath, unitType, name string, nodes int, timeout time.Duration) (Tools, error) {
	t := Tools{Heterps: filepath.Join(dir, "heterps"), Dir: dir, CatalogPath: filepath.Join(dir, "catalog-"+name+".toml"), Timeout: timeout}
	var err error
	if t.Heterpsd, err = loopback.Build(ctx, dir); err != nil {
		return t, err
	}
	if t.Catalog, err = loopback.TypeCatalog(catalogPath, unitType, name, nodes); err != nil {
		return t, err
	}
	text, err := t.Catalog.MarshalTOML()
	if err != nil {
		return t, fmt.Errorf("catalog: %w", err)
	}
	return t, os.WriteFile(t.CatalogPath, text, 0o600)
}

// Job is what a benchmark trains: a zoo model on a data spec.
type Job struct {
	Model, Data string
	Steps       int
	Batch       int    // samples a step, of the whole job
	Mode        string // heterps run's: "bsp" ("") or "asp"
}

// Train is `heterps train` of job with threads kernel threads.
func (t Tools) Train(ctx context.Context, job Job, threads int) (Result, error) {
	return t.command(ctx, job.Batch, t.Heterps, "train", "--model", job.Model, "--data", job.Data, "--steps", strconv.Itoa(job.Steps),
		"--batch", strconv.Itoa(job.Batch), "--threads", strconv.Itoa(threads), "--eval-samples", "0", "--json")
}

// Run is `heterps run` of job, in its mode, on nodes of the catalog's nodes, its
// throughput floor the one that plans one stage on all of them, its
// dense parameters synced by denseSync ("" for the job's default).
func (t Tools) Run(ctx context.Context, job Job, nodes int, denseSync string) (Result, error) {
	limit, err := loopback.Limit(ctx, t.Catalog, job.Model, job.Data, nodes, job.Batch, job.Steps)
	if err != nil {
		return Result{}, err
	}
	path := filepath.Join(t.Dir, fmt.Sprintf("job-%d-%d-%s-%s.toml", nodes, job.Batch, denseSync, job.Mode))
	if err := os.WriteFile(path, jobFile(job, limit, denseSync), 0o600); err != nil {
		return Result{}, err
	}
	return t.command(ctx, job.Batch, t.Heterps, "run", "--heterpsd", t.Heterpsd, "--catalog", t.CatalogPath, "--json", path)
}

// jobFile is the job file of job at throughput floor limit.
func jobFile(job Job, limit float64, denseSync string) []byte {
	mode := job.Mode
	if mode == "" {
		mode = "bsp"
	}
	text := fmt.Appendf(nil, "version = 1\nname = \"bench\"\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\nmode = %q\nseed = 1\n",
		job.Model, job.Data, job.Batch, job.Steps, limit, mode)
	if denseSync != "" {
		text = fmt.Appendf(text, "dense_sync = %q\n", denseSync)
	}
	return text
}

// printed is the part of `heterps train --json` and `heterps run --json`
// read here.
type printed struct {
	State       api.JobState `json:"state"` // heterps run only
	Reason      string       `json:"reason"`
	Steps       int64        `json:"steps"`
	Loss        float64      `json:"loss"`
	SamplesPerS float64      `json:"samples_per_s"`
}

// command runs a heterps command of batch samples a step that prints one
// JSON result.
func (t Tools) command(ctx context.Context, batch int, name string, args ...string) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	// SIGTERM lets heterps run stop its daemons; SIGKILL would leave them.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r printed
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return Result{}, fmt.Errorf("heterps %s (%v) printed no result (%w): %s", args[0], runErr, err, Tail(stderr.Bytes()))
	}
	if runErr != nil || (r.State != "" && r.State != api.JobDone) {
		return Result{}, fmt.Errorf("heterps %s (%v): %s %s: %s", args[0], runErr, r.State, r.Reason, Tail(stderr.Bytes()))
	}
	// The whole command's CPU, start included; wait4 counts the node daemons
	// heterps run started and reaped.
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return Result{SamplesPerS: r.SamplesPerS, Loss: r.Loss, Samples: float64(r.Steps) * float64(batch), CPUSeconds: cpu.Seconds()}, nil
}

// Tail is the end of a child's standard error, enough to say why it failed.
func Tail(b []byte) string {
	const keep = 600
	b = bytes.TrimSpace(b)
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}
