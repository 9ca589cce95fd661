package nn

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// savedCheckpoint trains a trainer of resumeModel for two steps (so that
// it has optimiser state), saves it and returns it and the file's path.
func savedCheckpoint(t *testing.T) (*Trainer, string) {
	t.Helper()
	cfg := mustModel(t, resumeModel)
	tr, err := NewTrainer(native.MustCPU(), cfg, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	trainSteps(t, tr, openData(t, "synthetic:4", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain}), 16, 2)
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := tr.Save(path); err != nil {
		t.Fatal(err)
	}
	return tr, path
}

func TestLoadRefusesAFlippedPayloadByte(t *testing.T) {
	_, path := savedCheckpoint(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-5] ^= 0x40 // in the last tensor's data: the header still parses
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := NewTrainer(native.MustCPU(), mustModel(t, resumeModel), 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := paramsOf(other)
	err = other.Load(path)
	if !errors.Is(err, ckpt.ErrChecksum) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("loading a file with a flipped bit: %v, want a checksum mismatch naming the file", err)
	}
	for name, w := range before {
		if g := paramsOf(other)[name]; !equalFloats(g, w) {
			t.Fatalf("%s changed by a refused load", name)
		}
	}
}

func TestLoadAcceptsAFileWithoutChecksumAndWarns(t *testing.T) {
	tr, path := savedCheckpoint(t)
	stripChecksum(t, path)
	var logged bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	defer slog.SetDefault(prev)
	loaded, err := NewTrainer(native.MustCPU(), mustModel(t, resumeModel), 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.Load(path); err != nil {
		t.Fatalf("a checkpoint written before checksums: %v", err)
	}
	if !strings.Contains(logged.String(), "without a payload checksum") || !strings.Contains(logged.String(), path) {
		t.Fatalf("no warning: %q", logged.String())
	}
	want := paramsOf(tr)
	for name, g := range paramsOf(loaded) {
		if !equalFloats(g, want[name]) {
			t.Fatalf("%s differs from the saved trainer", name)
		}
	}
}

// stripChecksum rewrites the checkpoint at path without its payload
// checksum, as files were written before checksums.
func stripChecksum(t *testing.T, path string) {
	t.Helper()
	f, err := ckpt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	meta := f.Metadata()
	if _, ok := meta[ckpt.KeyPayloadSHA256]; !ok {
		t.Fatal("Save wrote no payload checksum")
	}
	delete(meta, ckpt.KeyPayloadSHA256)
	var tensors []ckpt.Tensor
	for _, info := range f.Tensors() {
		v, err := f.Float32(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, ckpt.Float32(info.Name, info.Shape, v))
	}
	f.Close()
	if _, err := ckpt.WriteFile(path, meta, tensors); err != nil {
		t.Fatal(err)
	}
}
