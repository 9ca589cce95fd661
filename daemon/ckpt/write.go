package ckpt

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync/atomic"
	"unicode/utf8"
)

// Tensor is one named tensor to write. Build it with Float32, Int64 or Stream.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64

	elems int64 // the source slice's length; -1 for a stream
	write func(io.Writer) error
}

// Float32 returns an F32 tensor holding data, whose length must be the
// product of shape (1 for the scalar shape []).
func Float32(name string, shape []int64, data []float32) Tensor {
	return Tensor{Name: name, DType: F32, Shape: shape, elems: int64(len(data)),
		write: func(w io.Writer) error { return WriteFloat32(w, data) }}
}

// Int64 returns an I64 tensor holding data, whose length must be the product
// of shape.
func Int64(name string, shape []int64, data []int64) Tensor {
	return Tensor{Name: name, DType: I64, Shape: shape, elems: int64(len(data)),
		write: func(w io.Writer) error { return WriteInt64(w, data) }}
}

// Stream returns a tensor whose data write produces when the file is
// written, for tensors that are not one slice in memory (a parameter server's
// table, row by row). write must write exactly the shape's byte count of
// little-endian elements; WriteFloat32 and WriteInt64 help. An error from
// write aborts the whole file.
func Stream(name string, dtype DType, shape []int64, write func(w io.Writer) error) Tensor {
	return Tensor{Name: name, DType: dtype, Shape: shape, elems: -1, write: write}
}

// layout is a validated set of tensors in data order with their header.
type layout struct {
	tensors []Tensor
	infos   []TensorInfo
	header  []byte
}

// plan validates the tensors and metadata and lays the tensors out the way
// the reference implementation does: by element size, largest first (so every
// tensor is aligned to its element size), then by name.
func plan(meta map[string]string, tensors []Tensor) (*layout, error) {
	for k, v := range meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("metadata %q: key and value must be valid UTF-8", k)
		}
	}
	sorted := slices.Clone(tensors)
	slices.SortFunc(sorted, func(a, b Tensor) int {
		if c := cmp.Compare(b.DType.Size(), a.DType.Size()); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	l := &layout{tensors: sorted, infos: make([]TensorInfo, len(sorted))}
	seen := make(map[string]bool, len(sorted))
	var at int64
	for i, t := range sorted {
		n, err := checkTensor(t)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("tensor %q: name used twice", t.Name)
		}
		seen[t.Name] = true
		l.infos[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: at, End: at + n}
		at += n
	}
	l.header = encodeHeader(meta, l.infos)
	return l, nil
}

// checkTensor returns the tensor's byte length, or why it cannot be written.
func checkTensor(t Tensor) (int64, error) {
	switch {
	case t.Name == "" || t.Name == metadataKey:
		return 0, errors.New("invalid name")
	case !utf8.ValidString(t.Name):
		return 0, errors.New("name is not valid UTF-8")
	case t.DType.Size() == 0:
		return 0, fmt.Errorf("unknown dtype %v", t.DType)
	case t.write == nil:
		return 0, errors.New("no data: build tensors with Float32, Int64 or Stream")
	}
	n, err := byteLength(t.DType, t.Shape)
	if err != nil {
		return 0, err
	}
	if t.elems >= 0 && t.elems*t.DType.Size() != n {
		return 0, fmt.Errorf("%d elements given, shape %v needs %d", t.elems, t.Shape, n/t.DType.Size())
	}
	return n, nil
}

// writeTo writes the whole file to w and returns the bytes written.
func (l *layout) writeTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(len(l.header)))
	if _, err := cw.Write(size[:]); err != nil {
		return cw.n, fmt.Errorf("header: %w", err)
	}
	if _, err := cw.Write(l.header); err != nil {
		return cw.n, fmt.Errorf("header: %w", err)
	}
	for i, t := range l.tensors {
		want := l.infos[i].End - l.infos[i].Begin
		ew := &exactWriter{w: cw, left: want}
		err := t.write(ew)
		if err == nil && ew.left != 0 {
			err = fmt.Errorf("wrote %d bytes, shape %v of %s needs %d", want-ew.left, t.Shape, t.DType, want)
		}
		if err != nil {
			return cw.n, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	}
	return cw.n, nil
}

// Write writes the tensors and metadata to w in the safetensors layout and
// returns the bytes written. It is not atomic; WriteFile is.
func Write(w io.Writer, meta map[string]string, tensors []Tensor) (int64, error) {
	l, err := plan(meta, tensors)
	if err != nil {
		return 0, fmt.Errorf("ckpt: %w", err)
	}
	n, err := l.writeTo(w)
	if err != nil {
		return n, fmt.Errorf("ckpt: %w", err)
	}
	return n, nil
}

// FileEntry names a written file with its size and SHA-256: an entry of a
// manifest.
type FileEntry struct {
	Name   string `json:"name"` // base name, within the checkpoint directory
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // lower-case hex
}

// WriteFile writes the tensors and metadata to path atomically: a reader of
// path sees the previous file or the complete new one, never a part, and on
// any error the previous file is left as it was and no temporary file stays
// behind. The file is durable when WriteFile returns. It returns the file's
// manifest entry, its SHA-256 computed while writing.
func WriteFile(path string, meta map[string]string, tensors []Tensor) (FileEntry, error) {
	return WriteFileCounted(path, meta, tensors, nil)
}

// WriteFileCounted is WriteFile adding to written, if not nil, the bytes
// handed to the file as they go (a megabyte at a time): how far a long
// write has got, for a watcher to tell a slow disk from a hung one. The
// file's sync, last, adds nothing.
func WriteFileCounted(path string, meta map[string]string, tensors []Tensor, written *atomic.Int64) (FileEntry, error) {
	l, err := plan(meta, tensors)
	if err != nil {
		return FileEntry{}, fmt.Errorf("ckpt: write %s: %w", path, err)
	}
	sum := sha256.New()
	var size int64
	err = writeAtomic(path, func(f io.Writer) error {
		if written != nil {
			f = &progressWriter{w: f, written: written}
		}
		bw := bufio.NewWriterSize(io.MultiWriter(f, sum), 1<<20)
		n, err := l.writeTo(bw)
		if err != nil {
			return err
		}
		size = n
		return bw.Flush()
	})
	if err != nil {
		return FileEntry{}, err
	}
	return FileEntry{Name: filepath.Base(path), Size: size, SHA256: hex.EncodeToString(sum.Sum(nil))}, nil
}

// progressWriter adds what it passes on to written.
type progressWriter struct {
	w       io.Writer
	written *atomic.Int64
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.written.Add(int64(n))
	return n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

var errTooMuchData = errors.New("wrote more bytes than its shape holds")

// exactWriter passes at most left bytes through, so a faulty Stream callback
// cannot spill into the next tensor's range.
type exactWriter struct {
	w    io.Writer
	left int64
}

func (e *exactWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > e.left {
		return 0, errTooMuchData
	}
	n, err := e.w.Write(p)
	e.left -= int64(n)
	return n, err
}
