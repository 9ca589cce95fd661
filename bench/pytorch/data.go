package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
)

// batchMeta is what ctrdnn.py reads to rebuild the model and the batches.
type batchMeta struct {
	Batches int   `json:"batches"`
	Batch   int   `json:"batch"`
	Slots   int   `json:"slots"`
	Dense   int   `json:"dense"`
	Vocab   int64 `json:"vocab"`
	Dim     int   `json:"dim"`
	Hidden  []int `json:"hidden"`
}

// writeBatches writes the batches as raw little-endian arrays for PyTorch.
func writeBatches(dir string, cfg *config.Model, batches []*data.Batch) error {
	meta := batchMeta{Batches: len(batches), Batch: batches[0].Size, Slots: cfg.Input.Slots,
		Dense: cfg.Input.Dense, Vocab: cfg.Input.Vocab}
	for _, l := range cfg.Layers {
		switch {
		case l.Kind == "embedding":
			meta.Dim = l.Dim
		case l.Kind == "fc" && l.Act == "relu":
			meta.Hidden = append(meta.Hidden, l.Out)
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
	js, err := json.Marshal(meta)
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
