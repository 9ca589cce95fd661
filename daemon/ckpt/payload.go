package ckpt

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// KeyPayloadSHA256 is the metadata key of the SHA-256 (lower-case hex) of
// a file's data section, all its tensors' bytes in file order, for
// single-file checkpoints whose writer adds it (WithPayloadSHA256).
const KeyPayloadSHA256 = "heterps.payload_sha256"

// Errors CheckPayload wraps.
var (
	ErrChecksum   = errors.New("checksum mismatch")
	ErrNoChecksum = errors.New("no payload checksum (written before checksums)")
)

// WithPayloadSHA256 returns meta with KeyPayloadSHA256 set to the SHA-256
// of the data section that writing tensors with it produces. It runs every
// tensor's writer once more, so it suits tensors from slices (Float32,
// Int64), not streams that can run only once.
func WithPayloadSHA256(meta map[string]string, tensors []Tensor) (map[string]string, error) {
	l, err := plan(meta, tensors)
	if err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	sum := sha256.New()
	bw := bufio.NewWriterSize(sum, 1<<16)
	for i, t := range l.tensors {
		want := l.infos[i].End - l.infos[i].Begin
		ew := &exactWriter{w: bw, left: want}
		err := t.write(ew)
		if err == nil && ew.left != 0 {
			err = fmt.Errorf("wrote %d bytes, its shape needs %d", want-ew.left, want)
		}
		if err != nil {
			return nil, fmt.Errorf("ckpt: tensor %q: %w", t.Name, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	out := make(map[string]string, len(meta)+1)
	for k, v := range meta {
		out[k] = v
	}
	out[KeyPayloadSHA256] = hex.EncodeToString(sum.Sum(nil))
	return out, nil
}

// CheckPayload reads the whole data section and compares its SHA-256 with
// KeyPayloadSHA256: ErrChecksum when they differ, ErrNoChecksum when the
// file has none.
func (f *File) CheckPayload() error {
	want, ok := f.meta[KeyPayloadSHA256]
	if !ok {
		return fmt.Errorf("checkpoint %s: %w", f.name, ErrNoChecksum)
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, io.NewSectionReader(f.r, f.dataAt, f.dataLen)); err != nil {
		return fmt.Errorf("checkpoint %s: read the payload: %w", f.name, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != want {
		return fmt.Errorf("checkpoint %s: %w: its %d payload bytes hash to SHA-256 %s, the header says %s: the file is corrupt",
			f.name, ErrChecksum, f.dataLen, got, want)
	}
	return nil
}
