package ckpt

import (
	"encoding/binary"
	"io"
	"math"
	"unsafe"
)

// hostLittleEndian selects the zero-copy path: on little-endian hosts a
// tensor's memory already is its file layout. Tests switch it off to exercise
// the portable path.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// convertChunk is the buffer size of the portable (converting) path.
const convertChunk = 64 << 10

type element interface{ ~float32 | ~int64 }

// rawBytes views a slice's memory as bytes, without copying.
func rawBytes[T element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// WriteFloat32 writes v to w as little-endian float32s: the data layout of an
// F32 tensor. Use it inside a Stream callback to write a tensor piece by piece.
func WriteFloat32(w io.Writer, v []float32) error {
	if hostLittleEndian {
		_, err := w.Write(rawBytes(v))
		return err
	}
	return writeConverted(w, v, 4, func(b []byte, x float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(x)) })
}

// WriteInt64 writes v to w as little-endian int64s: the data layout of an
// I64 tensor.
func WriteInt64(w io.Writer, v []int64) error {
	if hostLittleEndian {
		_, err := w.Write(rawBytes(v))
		return err
	}
	return writeConverted(w, v, 8, func(b []byte, x int64) { binary.LittleEndian.PutUint64(b, uint64(x)) })
}

func writeConverted[T element](w io.Writer, v []T, size int, put func([]byte, T)) error {
	buf := make([]byte, min(len(v)*size, convertChunk))
	for len(v) > 0 {
		n := min(len(v), len(buf)/size)
		for i, x := range v[:n] {
			put(buf[i*size:], x)
		}
		if _, err := w.Write(buf[:n*size]); err != nil {
			return err
		}
		v = v[n:]
	}
	return nil
}

// readFloat32At fills dst with the little-endian float32s at offset off of r.
func readFloat32At(r io.ReaderAt, off int64, dst []float32) error {
	if hostLittleEndian {
		return readFullAt(r, off, rawBytes(dst))
	}
	return readConverted(r, off, dst, 4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
}

// readInt64At fills dst with the little-endian int64s at offset off of r.
func readInt64At(r io.ReaderAt, off int64, dst []int64) error {
	if hostLittleEndian {
		return readFullAt(r, off, rawBytes(dst))
	}
	return readConverted(r, off, dst, 8, func(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) })
}

func readConverted[T element](r io.ReaderAt, off int64, dst []T, size int, get func([]byte) T) error {
	buf := make([]byte, min(len(dst)*size, convertChunk))
	for len(dst) > 0 {
		n := min(len(dst), len(buf)/size)
		if err := readFullAt(r, off, buf[:n*size]); err != nil {
			return err
		}
		for i := range dst[:n] {
			dst[i] = get(buf[i*size:])
		}
		dst, off = dst[n:], off+int64(n*size)
	}
	return nil
}

// readFullAt reads exactly len(p) bytes at off. ReaderAt may report io.EOF
// together with a full read; that is success.
func readFullAt(r io.ReaderAt, off int64, p []byte) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
