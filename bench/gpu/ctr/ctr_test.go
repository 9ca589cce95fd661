//go:build cuda

// Package ctr trains CTR-DNN on the CUDA backend for bench/gpu/run.sh, which
// runs PyTorch on the same GPU and batches beside it. It is a test binary so
// that run.sh --prepare can build it for a GPU machine without Go.
package ctr

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/heterps/heterps/bench/internal/ctrbench"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// envInt reads a positive integer setting, or def.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// cudaOrSkip opens GPU 0, or skips the test on a machine without one.
func cudaOrSkip(t *testing.T) *native.CUDA {
	t.Helper()
	b, err := native.NewCUDA(native.CUDAOptions{})
	if errors.Is(err, native.ErrNoGPU) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestCTRDNNTrainingGPU trains ctrdnn on the GPU and prints one JSON line
// with samples/s. HETERPS_CTR_OUT names a folder to write the batches to
// (for PyTorch); HETERPS_CTR_STEPS and HETERPS_CTR_BATCH size the run.
func TestCTRDNNTrainingGPU(t *testing.T) {
	b := cudaOrSkip(t)
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	steps, batch := envInt(t, "HETERPS_CTR_STEPS", 200), envInt(t, "HETERPS_CTR_BATCH", 512)
	batches, err := ctrbench.MakeBatches(cfg, 64, batch)
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("HETERPS_CTR_OUT"); dir != "" {
		if err := ctrbench.WriteBatches(dir, cfg, batches); err != nil {
			t.Fatal(err)
		}
	}
	r, err := ctrbench.Train(b, cfg, batches, 20, steps)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(map[string]any{"backend": b.Name(), "steps": steps, "batch": batch,
		"samples_per_s": r.SamplesPerS, "loss_last50": r.Loss})
	fmt.Println(string(line))
}
