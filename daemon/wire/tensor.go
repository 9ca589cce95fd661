package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Tensor layout, inside a message payload. Integers are little-endian.
//
//	offset  size    field
//	     0     1    dtype: 1 = float32, 2 = int64
//	     1     1    rank r, 0..8 (rank 0 is a scalar: one element)
//	     2     6    reserved, must be 0
//	     8   8*r    dims, uint64 each, outermost first (row-major)
//	 8+8*r  n*s     data: n = product of dims, s = 4 (float32) or 8 (int64),
//	                each element little-endian
//	   ...   0..7   zero padding to a multiple of 8 bytes
//
// Every part is a multiple of 8 bytes long, so data that starts 8-aligned in
// a message payload (it always does, see message.go) lets a receiver use it
// in place (TensorView.Float32View). A decoder checks the rank, each dim, the
// element count (overflow-safe) and that n*s bytes are present before it
// allocates anything.

// DType is a tensor's element type.
type DType uint8

const (
	Float32 DType = 1
	Int64   DType = 2
)

// MaxRank is the most dimensions a tensor may have.
const MaxRank = 8

const tensorHeaderBase = 8

// pad8 is the padding that brings n up to a multiple of 8.
func pad8(n int) int { return -n & 7 }

var zeroPad [8]byte

// Size is the size of one element in bytes, 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Int64:
		return 8
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int64:
		return "int64"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Tensor is a dense row-major tensor to send. F32 holds the data of a
// Float32 tensor, I64 that of an Int64 one; the other is nil.
type Tensor struct {
	DType DType
	Shape []int
	F32   []float32
	I64   []int64
}

// F32Tensor returns a float32 tensor over data (not copied).
func F32Tensor(data []float32, shape ...int) Tensor {
	return Tensor{DType: Float32, Shape: shape, F32: data}
}

// I64Tensor returns an int64 tensor over data (not copied).
func I64Tensor(data []int64, shape ...int) Tensor {
	return Tensor{DType: Int64, Shape: shape, I64: data}
}

// check validates t against the codec's rules and returns its element count.
func (t *Tensor) check(maxElems int) (int, error) {
	if t.DType.Size() == 0 {
		return 0, fmt.Errorf("wire: tensor: unknown %v", t.DType)
	}
	if len(t.Shape) > MaxRank {
		return 0, fmt.Errorf("wire: tensor: rank %d over limit %d", len(t.Shape), MaxRank)
	}
	dims := make([]uint64, len(t.Shape))
	for i, d := range t.Shape {
		if d < 0 {
			return 0, fmt.Errorf("wire: tensor: negative dim %d at %d", d, i)
		}
		dims[i] = uint64(d)
	}
	n, err := elemCount(dims, maxElems)
	if err != nil {
		return 0, fmt.Errorf("wire: tensor shape %v: %w", t.Shape, err)
	}
	have := len(t.F32)
	if t.DType == Int64 {
		have = len(t.I64)
	}
	if have != n {
		return 0, fmt.Errorf("wire: tensor shape %v needs %d elements, data has %d", t.Shape, n, have)
	}
	return n, nil
}

// elemCount multiplies dims, failing when the product or any dim exceeds
// limit. It never overflows.
func elemCount(dims []uint64, limit int) (int, error) {
	n := uint64(1)
	zero := false
	for i, d := range dims {
		if d > uint64(limit) {
			return 0, fmt.Errorf("dim %d is %d, element limit %d", i, d, limit)
		}
		if d == 0 {
			zero = true
			continue
		}
		if n > uint64(limit)/d {
			return 0, fmt.Errorf("more than %d elements", limit)
		}
		n *= d
	}
	if zero {
		return 0, nil
	}
	return int(n), nil
}

// appendTensorHeader appends t's dtype, rank and dims.
func appendTensorHeader(dst []byte, t *Tensor) []byte {
	dst = append(dst, byte(t.DType), byte(len(t.Shape)), 0, 0, 0, 0, 0, 0)
	for _, d := range t.Shape {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(d))
	}
	return dst
}

// tensorData returns t's data as little-endian bytes: a view of t's memory on
// little-endian hosts, a copy elsewhere.
func tensorData(t *Tensor) []byte {
	if t.DType == Float32 {
		if len(t.F32) == 0 {
			return nil
		}
		if hostLittleEndian {
			return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t.F32))), len(t.F32)*4)
		}
		b := make([]byte, 0, len(t.F32)*4)
		for _, v := range t.F32 {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	if len(t.I64) == 0 {
		return nil
	}
	if hostLittleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t.I64))), len(t.I64)*8)
	}
	b := make([]byte, 0, len(t.I64)*8)
	for _, v := range t.I64 {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// AppendTensor appends t's encoding to dst. maxElems bounds the element count.
func AppendTensor(dst []byte, t Tensor, maxElems int) ([]byte, error) {
	if _, err := t.check(clampElems(maxElems)); err != nil {
		return dst, err
	}
	data := tensorData(&t)
	dst = append(appendTensorHeader(dst, &t), data...)
	return append(dst, zeroPad[:pad8(len(data))]...), nil
}

// TensorView is a decoded tensor whose data still lies in the frame it came
// in; it copies nothing until asked.
type TensorView struct {
	DType DType
	Shape []int
	data  []byte // n * DType.Size() little-endian bytes
}

// Len is the number of elements.
func (v *TensorView) Len() int {
	if v.DType.Size() == 0 {
		return 0
	}
	return len(v.data) / v.DType.Size()
}

// Bytes returns the raw little-endian data, aliasing the received frame.
func (v *TensorView) Bytes() []byte { return v.data }

// Float32s decodes the data into dst, reusing its storage when it has room
// for Len elements and allocating otherwise, and returns dst[:Len].
func (v *TensorView) Float32s(dst []float32) ([]float32, error) {
	if v.DType != Float32 {
		return nil, fmt.Errorf("wire: tensor is %v, not float32", v.DType)
	}
	n := v.Len()
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	dst = dst[:n]
	if n == 0 {
		return dst, nil
	}
	if hostLittleEndian {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), n*4), v.data)
		return dst, nil
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(v.data[4*i:]))
	}
	return dst, nil
}

// Float32View returns the data in place, without copying, when this host
// can read it so (little-endian, aligned); ok is false otherwise, and for
// other dtypes. The slice aliases the received frame: it is valid until the
// message is released.
func (v *TensorView) Float32View() (data []float32, ok bool) {
	if v.DType != Float32 || !hostLittleEndian || uintptr(unsafe.Pointer(unsafe.SliceData(v.data)))%4 != 0 {
		return nil, false
	}
	if len(v.data) == 0 {
		return []float32{}, true
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(v.data))), len(v.data)/4), true
}

// Int64View is Float32View for int64 tensors.
func (v *TensorView) Int64View() (data []int64, ok bool) {
	if v.DType != Int64 || !hostLittleEndian || uintptr(unsafe.Pointer(unsafe.SliceData(v.data)))%8 != 0 {
		return nil, false
	}
	if len(v.data) == 0 {
		return []int64{}, true
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(v.data))), len(v.data)/8), true
}

// Int64s decodes the data into dst like Float32s.
func (v *TensorView) Int64s(dst []int64) ([]int64, error) {
	if v.DType != Int64 {
		return nil, fmt.Errorf("wire: tensor is %v, not int64", v.DType)
	}
	n := v.Len()
	if cap(dst) < n {
		dst = make([]int64, n)
	}
	dst = dst[:n]
	if n == 0 {
		return dst, nil
	}
	if hostLittleEndian {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), n*8), v.data)
		return dst, nil
	}
	for i := range dst {
		dst[i] = int64(binary.LittleEndian.Uint64(v.data[8*i:]))
	}
	return dst, nil
}

// Tensor returns a copy of v that owns its data.
func (v *TensorView) Tensor() Tensor {
	t := Tensor{DType: v.DType, Shape: append([]int(nil), v.Shape...)}
	switch v.DType {
	case Float32:
		t.F32, _ = v.Float32s(nil)
	case Int64:
		t.I64, _ = v.Int64s(nil)
	}
	return t
}

// DecodeTensor decodes one tensor from the front of b and returns it with
// the bytes after it. The view aliases b. maxElems bounds the element count.
func DecodeTensor(b []byte, maxElems int) (TensorView, []byte, error) {
	return decodeTensor(b, maxElems, -1)
}

// decodeTensor decodes the index'th tensor of a message (-1: a lone one).
func decodeTensor(b []byte, maxElems, index int) (TensorView, []byte, error) {
	v, rest, err := decodeTensorBody(b, clampElems(maxElems))
	var de *DecodeError
	if index >= 0 && errors.As(err, &de) {
		de.Part = fmt.Sprintf("message tensor %d", index)
	}
	return v, rest, err
}

func decodeTensorBody(b []byte, maxElems int) (TensorView, []byte, error) {
	const part = "tensor"
	if len(b) < tensorHeaderBase {
		return TensorView{}, nil, decodeErr(part, ErrTruncated, "header: got %d of %d bytes", len(b), tensorHeaderBase)
	}
	dt, rank := DType(b[0]), int(b[1])
	if dt.Size() == 0 {
		return TensorView{}, nil, decodeErr(part, ErrMalformed, "unknown dtype %d", b[0])
	}
	if rank > MaxRank {
		return TensorView{}, nil, decodeErr(part, ErrTooLarge, "rank %d, limit %d", rank, MaxRank)
	}
	if !allZero(b[2:tensorHeaderBase]) {
		return TensorView{}, nil, decodeErr(part, ErrMalformed, "reserved bytes are %x, want 0", b[2:tensorHeaderBase])
	}
	hdr := tensorHeaderBase + 8*rank
	if len(b) < hdr {
		return TensorView{}, nil, decodeErr(part, ErrTruncated, "dims: got %d of %d bytes", len(b)-tensorHeaderBase, 8*rank)
	}
	var dims [MaxRank]uint64
	for i := range rank {
		dims[i] = binary.LittleEndian.Uint64(b[tensorHeaderBase+8*i:])
	}
	n, err := elemCount(dims[:rank], maxElems)
	if err != nil {
		return TensorView{}, nil, decodeErr(part, ErrTooLarge, "shape %v: %v", dims[:rank], err)
	}
	rest := b[hdr:]
	// n <= maxElems and maxElems is clamped well below MaxInt/8, so this
	// product cannot overflow.
	size := n * dt.Size()
	padded := size + pad8(size)
	if len(rest) < padded {
		return TensorView{}, nil, decodeErr(part, ErrTruncated, "data: got %d of %d bytes (padded) for shape %v", len(rest), padded, dims[:rank])
	}
	if !allZero(rest[size:padded]) {
		return TensorView{}, nil, decodeErr(part, ErrMalformed, "padding after the data is %x, want 0", rest[size:padded])
	}
	shape := make([]int, rank)
	for i := range rank {
		shape[i] = int(dims[i])
	}
	return TensorView{DType: dt, Shape: shape, data: rest[:size:size]}, rest[padded:], nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// clampElems keeps an element limit where n*8 cannot overflow an int.
func clampElems(n int) int { return max(0, min(n, math.MaxInt/8)) }

var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()
