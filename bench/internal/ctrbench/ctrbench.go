// Package ctrbench holds what the CTR-DNN training benchmarks share: the
// batches both heterps and PyTorch train on, written in the raw form
// bench/pytorch/ctrdnn.py reads, and heterps' timed training loop.
package ctrbench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/native"
)

// MakeBatches reads n batches of size samples from the synthetic source.
func MakeBatches(cfg *config.Model, n, size int) ([]*data.Batch, error) {
	src, err := data.Open("synthetic:1", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	if err != nil {
		return nil, err
	}
	defer src.Close()
	out := make([]*data.Batch, n)
	for i := range out {
		if out[i], err = src.Next(context.Background(), size); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// meta is what ctrdnn.py reads to rebuild the model and the batches.
type meta struct {
	Batches int   `json:"batches"`
	Batch   int   `json:"batch"`
	Slots   int   `json:"slots"`
	Dense   int   `json:"dense"`
	Vocab   int64 `json:"vocab"`
	Dim     int   `json:"dim"`
	Hidden  []int `json:"hidden"`
}

// WriteBatches writes the batches as raw little-endian arrays for PyTorch.
func WriteBatches(dir string, cfg *config.Model, batches []*data.Batch) error {
	m := meta{Batches: len(batches), Batch: batches[0].Size, Slots: cfg.Input.Slots,
		Dense: cfg.Input.Dense, Vocab: cfg.Input.Vocab}
	for _, l := range cfg.Layers {
		switch {
		case l.Kind == "embedding":
			m.Dim = l.Dim
		case l.Kind == "fc" && l.Act == "relu":
			m.Hidden = append(m.Hidden, l.Out)
		}
	}
	var ids, offsets []int64
	var dense, labels []float32
	for _, b := range batches {
		ids = append(ids, b.IDs...)
		offsets = append(offsets, b.Offsets...)
		dense = append(dense, b.Dense...)
		labels = append(labels, b.Labels...)
	}
	files := map[string]any{"ids.i64": ids, "offsets.i64": offsets, "dense.f32": dense, "labels.f32": labels}
	for name, v := range files {
		if err := writeRaw(filepath.Join(dir, name), v); err != nil {
			return err
		}
	}
	js, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "meta.json"), js, 0o644)
}

func writeRaw(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := binary.Write(f, binary.LittleEndian, v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Result is one timed heterps run.
type Result struct {
	SamplesPerS float64
	Loss        float64 // mean over the last 50 steps
}

// Train runs warmup untimed and steps timed training steps of cfg on b,
// cycling through batches. Each step ends with the loss on the host, so
// device work is finished when the clock stops.
func Train(b native.Backend, cfg *config.Model, batches []*data.Batch, warmup, steps int) (Result, error) {
	tr, err := nn.NewTrainer(b, cfg, 1, int64(warmup+steps))
	if err != nil {
		return Result{}, err
	}
	for i := range warmup {
		if _, err := tr.Step(batches[i%len(batches)]); err != nil {
			return Result{}, err
		}
	}
	start := time.Now()
	var tail []float64
	for i := range steps {
		loss, err := tr.Step(batches[(warmup+i)%len(batches)])
		if err != nil {
			return Result{}, err
		}
		tail = append(tail, loss)
	}
	secs := time.Since(start).Seconds()
	tail = tail[max(0, len(tail)-50):]
	sum := 0.0
	for _, l := range tail {
		sum += l
	}
	return Result{SamplesPerS: float64(steps*batches[0].Size) / secs, Loss: sum / float64(max(len(tail), 1))}, nil
}
