package ckpt

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"syscall"
)

// MaxHeaderSize caps the JSON header a reader accepts, checked before the
// header is allocated. It is the reference implementation's limit.
const MaxHeaderSize = 100_000_000

// Metadata keys heterps writes, and the format version this package reads.
const (
	KeyModel         = "heterps.model"          // model name, e.g. "ctrdnn"
	KeyStep          = "heterps.step"           // training step, decimal
	KeyFormatVersion = "heterps.format_version" // FormatVersion
	FormatVersion    = "1"
)

// NewMetadata returns the metadata every heterps checkpoint carries; callers
// add their own keys (optimiser hyper-parameters) to it.
func NewMetadata(model string, step int64) map[string]string {
	return map[string]string{
		KeyModel:         model,
		KeyStep:          strconv.FormatInt(step, 10),
		KeyFormatVersion: FormatVersion,
	}
}

// File is an open checkpoint file. Its header has been checked; tensor data
// is read on demand, each tensor from its own byte range. A File is safe for
// concurrent use.
type File struct {
	name    string
	r       io.ReaderAt
	closer  io.Closer
	dataAt  int64 // offset of the data section
	dataLen int64 // its length: the rest of the file
	meta    map[string]string
	tensors map[string]TensorInfo
}

// ErrNotRegular refuses a checkpoint path that is a directory, a named
// pipe, a device or a socket (config.ErrNotRegular is the same for config
// files).
var ErrNotRegular = errors.New("not a checkpoint file")

// Open opens and checks the checkpoint file at path.
func Open(path string) (*File, error) {
	// O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever
	// for a path given by mistake; a regular file reads as usual with it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is %s, %w", path, notRegular(st.Mode()), ErrNotRegular)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	cf, err := NewReader(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	cf.closer = f
	return cf, nil
}

// notRegular names what a file of mode is when it is not a regular file,
// e.g. "a named pipe".
func notRegular(mode os.FileMode) string {
	switch t := mode.Type(); {
	case t&os.ModeDir != 0:
		return "a directory"
	case t&os.ModeNamedPipe != 0:
		return "a named pipe"
	case t&os.ModeSocket != 0:
		return "a socket"
	case t&os.ModeDevice != 0:
		return "a device"
	default:
		return fmt.Sprintf("not a regular file (mode %v)", t)
	}
}

// NewReader checks the header of the size-byte checkpoint r holds; name
// identifies it in errors. Malformed files give a *FormatError.
func NewReader(r io.ReaderAt, size int64, name string) (*File, error) {
	fail := func(format string, args ...any) error {
		return &FormatError{File: name, Reason: fmt.Sprintf(format, args...)}
	}
	if size < 8 {
		return nil, fail("file is %d bytes, too short for the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if err := readFullAt(r, 0, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("checkpoint %s: read header length: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fail("header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, fail("header length %d runs past the end of the %d-byte file", n, size)
	}
	hdr := make([]byte, n)
	if err := readFullAt(r, 8, hdr); err != nil {
		return nil, fmt.Errorf("checkpoint %s: read header: %w", name, err)
	}
	meta, infos, err := parseHeader(name, hdr)
	if err != nil {
		return nil, err
	}
	dataAt := 8 + int64(n)
	if err := validateLayout(name, infos, size-dataAt); err != nil {
		return nil, err
	}
	f := &File{name: name, r: r, dataAt: dataAt, dataLen: size - dataAt, meta: meta, tensors: make(map[string]TensorInfo, len(infos))}
	for _, t := range infos {
		f.tensors[t.Name] = t
	}
	return f, nil
}

// Close closes the file Open opened; for a File from NewReader it does nothing.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	return f.closer.Close()
}

// Name returns the path or name the file was opened with.
func (f *File) Name() string { return f.name }

// Metadata returns a copy of the file's metadata.
func (f *File) Metadata() map[string]string { return maps.Clone(f.meta) }

// Meta returns one metadata value.
func (f *File) Meta(key string) (string, bool) {
	v, ok := f.meta[key]
	return v, ok
}

// Tensors returns the file's tensors sorted by name.
func (f *File) Tensors() []TensorInfo {
	out := slices.Collect(maps.Values(f.tensors))
	slices.SortFunc(out, func(a, b TensorInfo) int { return cmp.Compare(a.Name, b.Name) })
	for i := range out {
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	t, ok := f.tensors[name]
	t.Shape = slices.Clone(t.Shape)
	return t, ok
}

// ModelMismatchError reports a checkpoint of another model than the one asked for.
type ModelMismatchError struct {
	File, Got, Want string
}

func (e *ModelMismatchError) Error() string {
	return fmt.Sprintf("checkpoint %s is of model %s, not %s", e.File, e.Got, e.Want)
}

// CheckModel returns an error unless the file is a heterps checkpoint of the
// model named want, in a format version this package reads. A file of
// another model gives a *ModelMismatchError.
func (f *File) CheckModel(want string) error {
	if v, ok := f.meta[KeyFormatVersion]; ok && v != FormatVersion {
		return fmt.Errorf("checkpoint %s has format version %q; this build reads version %s", f.name, v, FormatVersion)
	}
	got, ok := f.meta[KeyModel]
	if !ok {
		return fmt.Errorf("checkpoint %s has no %s metadata: not a heterps checkpoint", f.name, KeyModel)
	}
	if got != want {
		return &ModelMismatchError{File: f.name, Got: got, Want: want}
	}
	return nil
}

// Step returns the training step recorded in the metadata.
func (f *File) Step() (int64, error) {
	v, ok := f.meta[KeyStep]
	if !ok {
		return 0, fmt.Errorf("checkpoint %s has no %s metadata", f.name, KeyStep)
	}
	step, err := strconv.ParseInt(v, 10, 64)
	if err != nil || step < 0 {
		return 0, fmt.Errorf("checkpoint %s: %s is %q, not a step number", f.name, KeyStep, v)
	}
	return step, nil
}

// Float32 reads the named F32 tensor into a new slice.
func (f *File) Float32(name string) ([]float32, error) {
	t, err := f.lookup(name, F32)
	if err != nil {
		return nil, err
	}
	dst := make([]float32, t.NumElements())
	return dst, f.read(t, func(at int64) error { return readFloat32At(f.r, at, dst) })
}

// ReadFloat32 reads the named F32 tensor into dst, whose length must be the
// tensor's element count.
func (f *File) ReadFloat32(name string, dst []float32) error {
	t, err := f.lookup(name, F32)
	if err != nil {
		return err
	}
	if err := f.checkLen(t, len(dst)); err != nil {
		return err
	}
	return f.read(t, func(at int64) error { return readFloat32At(f.r, at, dst) })
}

// ReadFloat32At reads len(dst) elements of the named F32 tensor starting at
// element off (row-major), for reading a large tensor in pieces.
func (f *File) ReadFloat32At(name string, dst []float32, off int64) error {
	t, err := f.lookupRange(name, F32, off, len(dst))
	if err != nil {
		return err
	}
	return f.read(t, func(at int64) error { return readFloat32At(f.r, at+off*4, dst) })
}

// Int64 reads the named I64 tensor into a new slice.
func (f *File) Int64(name string) ([]int64, error) {
	t, err := f.lookup(name, I64)
	if err != nil {
		return nil, err
	}
	dst := make([]int64, t.NumElements())
	return dst, f.read(t, func(at int64) error { return readInt64At(f.r, at, dst) })
}

// ReadInt64 reads the named I64 tensor into dst, whose length must be the
// tensor's element count.
func (f *File) ReadInt64(name string, dst []int64) error {
	t, err := f.lookup(name, I64)
	if err != nil {
		return err
	}
	if err := f.checkLen(t, len(dst)); err != nil {
		return err
	}
	return f.read(t, func(at int64) error { return readInt64At(f.r, at, dst) })
}

// ReadInt64At reads len(dst) elements of the named I64 tensor starting at
// element off.
func (f *File) ReadInt64At(name string, dst []int64, off int64) error {
	t, err := f.lookupRange(name, I64, off, len(dst))
	if err != nil {
		return err
	}
	return f.read(t, func(at int64) error { return readInt64At(f.r, at+off*8, dst) })
}

// Section returns a reader of the named tensor's raw little-endian bytes.
func (f *File) Section(name string) (*io.SectionReader, TensorInfo, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, t, f.missing(name)
	}
	return io.NewSectionReader(f.r, f.dataAt+t.Begin, t.End-t.Begin), t, nil
}

// errMissingTensor is wrapped by the errors for a tensor that is not in the file.
var errMissingTensor = errors.New("no such tensor")

func (f *File) missing(name string) error {
	return fmt.Errorf("checkpoint %s: tensor %q: %w", f.name, name, errMissingTensor)
}

func (f *File) lookup(name string, dt DType) (TensorInfo, error) {
	t, ok := f.tensors[name]
	if !ok {
		return t, f.missing(name)
	}
	if t.DType != dt {
		return t, fmt.Errorf("checkpoint %s: tensor %q is %s, not %s", f.name, name, t.DType, dt)
	}
	if t.NumElements() > math.MaxInt {
		return t, fmt.Errorf("checkpoint %s: tensor %q has %d elements, too many for this platform", f.name, name, t.NumElements())
	}
	return t, nil
}

func (f *File) checkLen(t TensorInfo, n int) error {
	if int64(n) != t.NumElements() {
		return fmt.Errorf("checkpoint %s: tensor %q has %d elements, buffer holds %d", f.name, t.Name, t.NumElements(), n)
	}
	return nil
}

// lookupRange checks that elements [off, off+n) of the tensor exist.
func (f *File) lookupRange(name string, dt DType, off int64, n int) (TensorInfo, error) {
	t, err := f.lookup(name, dt)
	if err != nil {
		return t, err
	}
	total := t.NumElements()
	if off < 0 || off > total || int64(n) > total-off {
		return t, fmt.Errorf("checkpoint %s: tensor %q has %d elements, cannot read %d from element %d", f.name, name, total, n, off)
	}
	return t, nil
}

// read runs load with the tensor's absolute offset and names the tensor in
// any error.
func (f *File) read(t TensorInfo, load func(at int64) error) error {
	if err := load(f.dataAt + t.Begin); err != nil {
		return fmt.Errorf("checkpoint %s: tensor %q: read: %w", f.name, t.Name, err)
	}
	return nil
}
