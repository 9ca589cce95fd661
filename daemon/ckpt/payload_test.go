package ckpt

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestPayloadSHA256IsTheDataSectionsHash(t *testing.T) {
	tensors := []Tensor{
		Float32("w", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
		Int64("ids", []int64{2}, []int64{7, 9}),
		Float32("b", []int64{1}, []float32{-1}),
	}
	meta, err := WithPayloadSHA256(NewMetadata("m", 3), tensors)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.safetensors")
	if _, err := WriteFile(path, meta, tensors); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data := raw[8+binary.LittleEndian.Uint64(raw):]
	if sum := sha256.Sum256(data); meta[KeyPayloadSHA256] != hex.EncodeToString(sum[:]) {
		t.Fatalf("recorded %s, the data section hashes to %x", meta[KeyPayloadSHA256], sum)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.CheckPayload(); err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.CheckPayload(); !errors.Is(err, ErrChecksum) {
		t.Fatalf("flipped bit: %v, want ErrChecksum", err)
	}
}

func TestCheckPayloadWithoutChecksum(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.safetensors")
	if _, err := WriteFile(path, NewMetadata("m", 1), []Tensor{Float32("w", []int64{1}, []float32{1})}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.CheckPayload(); !errors.Is(err, ErrNoChecksum) {
		t.Fatalf("got %v, want ErrNoChecksum", err)
	}
}
