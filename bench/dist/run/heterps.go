package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/heterps/heterps/bench/internal/heterpsbin"
	"github.com/heterps/heterps/config"
)

// tools are the binaries the default mode runs.
type tools struct{ heterpsbin.Tools }

// buildTools builds heterps and heterpsd from this tree into dir; it must
// run from the repository root.
func buildTools(ctx context.Context, dir string) (tools, error) {
	t, err := heterpsbin.Build(ctx, dir)
	return tools{t}, err
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
		begin := time.Now()
		r, err := t.Run(ctx, catPath, jobPath)
		wall := time.Since(begin).Seconds()
		if err != nil {
			return nil, err
		}
		return &outcome{samplesPerS: r.SamplesPerS, steps: r.Steps, jobSeconds: r.Seconds, wallSeconds: wall,
			loss: r.Loss, stages: r.Stages}, nil
	}
}
