package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
)

// The make-run block trains make run's own job file, only its steps
// changed.
func TestMakeRunJobFileChangesOnlyTheSteps(t *testing.T) {
	src := filepath.Join("..", "..", "..", makeRunJob)
	path, err := makeRunJobFile(src, t.TempDir(), 1234)
	if err != nil {
		t.Fatal(err)
	}
	want, err := config.LoadJob(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.LoadJob(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Steps != 1234 {
		t.Errorf("steps %d, want 1234", got.Steps)
	}
	got.Steps = want.Steps
	if got.Name != want.Name || got.Batch != want.Batch || got.Model != want.Model || got.Data != want.Data || got.Mode != want.Mode {
		t.Errorf("job %+v, want %+v but for its steps", got, want)
	}
}

func TestMakeRunJobFileRefusesAnotherBatch(t *testing.T) {
	src := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(src, []byte("batch = 256\nsteps = 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := makeRunJobFile(src, t.TempDir(), 100); err == nil || !strings.Contains(err.Error(), "want batch = 512") {
		t.Errorf("a job of batch 256: %v, want refused", err)
	}
}
