package ckpt

import (
	"fmt"
	"math"
	"math/bits"
)

// DType is the element type of a tensor.
type DType uint8

// The element types heterps stores. Their header names are the safetensors ones.
const (
	F32 DType = iota + 1 // float32, "F32"
	I64                  // int64, "I64"
)

// String returns the dtype's name in the safetensors header.
func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case I64:
		return "I64"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the bytes per element, or 0 for an unknown dtype.
func (d DType) Size() int64 {
	switch d {
	case F32:
		return 4
	case I64:
		return 8
	}
	return 0
}

func parseDType(s string) (DType, bool) {
	switch s {
	case "F32":
		return F32, true
	case "I64":
		return I64, true
	}
	return 0, false
}

// MaxRank is the largest number of dimensions a tensor may have (numpy's limit).
const MaxRank = 64

// byteLength returns the bytes a tensor of the dtype and shape occupies,
// refusing negative dimensions and sizes that overflow int64.
func byteLength(d DType, shape []int64) (int64, error) {
	if len(shape) > MaxRank {
		return 0, fmt.Errorf("shape has %d dimensions, more than %d", len(shape), MaxRank)
	}
	n := d.Size()
	for i, dim := range shape {
		if dim < 0 {
			return 0, fmt.Errorf("shape dimension %d is negative (%d)", i, dim)
		}
		hi, lo := bits.Mul64(uint64(n), uint64(dim))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v of %s overflows a 64-bit byte count", shape, d)
		}
		n = int64(lo)
	}
	return n, nil
}
