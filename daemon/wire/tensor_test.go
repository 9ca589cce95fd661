package wire

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
	"unsafe"
)

func TestTensorRoundTrip(t *testing.T) {
	big := make([]float32, 1<<21) // 8 MiB
	for i := range big {
		big[i] = float32(i) * 0.5
	}
	cases := []struct {
		name string
		t    Tensor
	}{
		{"scalar", F32Tensor([]float32{math.Pi})},
		{"empty vector", F32Tensor(nil, 0)},
		{"zero inside", I64Tensor(nil, 3, 0, 2)},
		{"matrix", F32Tensor([]float32{1, -2, float32(math.Inf(1)), 4, 5, 6}, 2, 3)},
		{"int64 extremes", I64Tensor([]int64{math.MinInt64, -1, 0, math.MaxInt64}, 4)},
		{"max rank", F32Tensor(make([]float32, 128), 1, 2, 2, 2, 2, 2, 2, 2)},
		{"large", F32Tensor(big, 1024, 2048)},
	}
	for _, c := range cases {
		enc, err := AppendTensor([]byte("prefix"), c.t, 1<<30)
		if err != nil {
			t.Fatalf("%s: encode: %v", c.name, err)
		}
		enc = append(enc, "suffix"...)
		v, rest, err := DecodeTensor(enc[len("prefix"):], 1<<30)
		if err != nil {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		if string(rest) != "suffix" {
			t.Errorf("%s: rest = %q", c.name, rest)
		}
		got := v.Tensor()
		if got.DType != c.t.DType || !equalShape(got.Shape, c.t.Shape) {
			t.Errorf("%s: got %v %v, want %v %v", c.name, got.DType, got.Shape, c.t.DType, c.t.Shape)
		}
		if !reflect.DeepEqual(nilIfEmpty(got.F32), nilIfEmpty(c.t.F32)) || !reflect.DeepEqual(nilIfEmpty(got.I64), nilIfEmpty(c.t.I64)) {
			t.Errorf("%s: data differs", c.name)
		}
	}
}

func equalShape(a, b []int) bool { return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b)) }

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestTensorLittleEndianLayout(t *testing.T) {
	enc, err := AppendTensor(nil, F32Tensor([]float32{1.5}, 1), 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(1.5))
	want = append(want, 0, 0, 0, 0) // padding to 8 bytes
	if string(enc) != string(want) {
		t.Fatalf("got %x, want %x", enc, want)
	}
}

func TestTensorDecodesIntoCallerBuffer(t *testing.T) {
	enc, _ := AppendTensor(nil, F32Tensor([]float32{1, 2, 3}, 3), 10)
	v, _, err := DecodeTensor(enc, 10)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float32, 0, 8)
	got, err := v.Float32s(buf)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.SliceData(got) != unsafe.SliceData(buf) || !reflect.DeepEqual(got, []float32{1, 2, 3}) {
		t.Errorf("got %v at %p, want [1 2 3] in the caller's buffer %p", got, unsafe.SliceData(got), unsafe.SliceData(buf))
	}
	small := make([]float32, 1)
	if got, _ := v.Float32s(small); len(got) != 3 || unsafe.SliceData(got) == unsafe.SliceData(small) {
		t.Errorf("a too-small buffer should be replaced, got %v", got)
	}
	if _, err := v.Int64s(nil); err == nil {
		t.Error("Int64s on a float32 tensor succeeded")
	}

	ienc, _ := AppendTensor(nil, I64Tensor([]int64{7, -8}, 2), 10)
	iv, _, _ := DecodeTensor(ienc, 10)
	ibuf := make([]int64, 2)
	if got, err := iv.Int64s(ibuf); err != nil || unsafe.SliceData(got) != unsafe.SliceData(ibuf) || got[1] != -8 {
		t.Errorf("Int64s = %v, %v", got, err)
	}
	if _, err := iv.Float32s(nil); err == nil {
		t.Error("Float32s on an int64 tensor succeeded")
	}
}

func TestDecodeTensorRejects(t *testing.T) {
	header := func(dt DType, dims ...uint64) []byte {
		b := []byte{byte(dt), byte(len(dims)), 0, 0, 0, 0, 0, 0}
		for _, d := range dims {
			b = binary.LittleEndian.AppendUint64(b, d)
		}
		return b
	}
	cases := []struct {
		name     string
		in       []byte
		maxElems int
		want     error
	}{
		{"empty", nil, 10, ErrTruncated},
		{"short header", []byte{1, 0, 0, 0}, 10, ErrTruncated},
		{"dtype", header(9), 10, ErrMalformed},
		{"rank", append([]byte{1, 9, 0, 0, 0, 0, 0, 0}, make([]byte, 72)...), 10, ErrTooLarge},
		{"reserved", append([]byte{1, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 8)...), 10, ErrMalformed},
		{"padding missing", append(header(Float32, 1), make([]byte, 4)...), 10, ErrTruncated},
		{"padding not zero", append(header(Float32, 1), 0, 0, 0, 0, 0, 0, 0, 1), 10, ErrMalformed},
		{"short dims", header(Float32, 2, 2)[:20], 10, ErrTruncated},
		{"short data", append(header(Float32, 2, 2), make([]byte, 15)...), 10, ErrTruncated},
		{"scalar without data", header(Int64), 10, ErrTruncated},
		{"count over limit", header(Float32, 4, 4), 15, ErrTooLarge},
		{"dim over limit", header(Float32, 1<<40, 0), 1 << 30, ErrTooLarge},
		{"product overflows uint64", header(Float32, 1<<32, 1<<32, 1<<32), math.MaxInt, ErrTooLarge},
		{"huge count, no data", header(Int64, 1<<29, 1<<30), math.MaxInt, ErrTruncated},
	}
	for _, c := range cases {
		_, _, err := DecodeTensor(c.in, c.maxElems)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestAppendTensorRejects(t *testing.T) {
	cases := []struct {
		name string
		t    Tensor
	}{
		{"dtype", Tensor{DType: 3}},
		{"rank", F32Tensor(make([]float32, 1), 1, 1, 1, 1, 1, 1, 1, 1, 1)},
		{"negative dim", F32Tensor(nil, -1)},
		{"data shorter than shape", F32Tensor([]float32{1, 2}, 3)},
		{"data in the wrong field", Tensor{DType: Int64, Shape: []int{1}, F32: []float32{1}}},
		{"over limit", F32Tensor(make([]float32, 11), 11)},
	}
	for _, c := range cases {
		if _, err := AppendTensor(nil, c.t, 10); err == nil {
			t.Errorf("%s: encoded", c.name)
		}
	}
}

func TestTensorViewsAliasAlignedData(t *testing.T) {
	m := &Message{Type: MsgPushSparse, Text: "abc", Tensors: []Tensor{
		F32Tensor([]float32{1, 2, 3}, 3), // 12 bytes: padded, so the next stays aligned
		I64Tensor([]int64{-4, 5}, 2),
	}}
	payload, err := AppendMessage(make([]byte, 0, 256), m, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	v, err := DecodeMessage(m.Type, payload, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range v.Tensors {
		if off := uintptr(unsafe.Pointer(unsafe.SliceData(v.Tensors[i].Bytes()))) - uintptr(unsafe.Pointer(&payload[0])); off%8 != 0 {
			t.Errorf("tensor %d data at payload offset %d, not 8-aligned", i, off)
		}
	}
	f, ok := v.Tensors[0].Float32View()
	if !ok || !reflect.DeepEqual(f, []float32{1, 2, 3}) {
		t.Fatalf("Float32View = %v, %v", f, ok)
	}
	ints, ok := v.Tensors[1].Int64View()
	if !ok || !reflect.DeepEqual(ints, []int64{-4, 5}) {
		t.Fatalf("Int64View = %v, %v", ints, ok)
	}
	binary.LittleEndian.PutUint64(payload[len(payload)-16:], 9) // the view aliases the payload
	if ints[0] != 9 {
		t.Errorf("Int64View is a copy, not a view")
	}
	if _, ok := v.Tensors[0].Int64View(); ok {
		t.Error("Int64View of a float32 tensor")
	}
	if _, ok := v.Tensors[1].Float32View(); ok {
		t.Error("Float32View of an int64 tensor")
	}
}

// TestBigEndianFallback runs the codec's portable paths, which big-endian
// hosts use, and checks they produce the same bytes and values.
func TestBigEndianFallback(t *testing.T) {
	m := &Message{Type: MsgPushSparse, Tensors: []Tensor{
		I64Tensor([]int64{-1, 1 << 40}, 2),
		F32Tensor([]float32{1.5, float32(math.Inf(-1)), float32(math.Copysign(0, -1))}, 3),
	}}
	native, err := AppendMessage(nil, m, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	hostLittleEndian = false
	defer func() { hostLittleEndian = true }()
	portable, err := AppendMessage(nil, m, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(native, portable) {
		t.Fatalf("portable encoding differs:\n got %x\nwant %x", portable, native)
	}
	v, err := DecodeMessage(m.Type, portable, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	ints, _ := v.Tensors[0].Int64s(nil)
	floats, _ := v.Tensors[1].Float32s(nil)
	if !reflect.DeepEqual(ints, m.Tensors[0].I64) || math.Float32bits(floats[2]) != 1<<31 || floats[0] != 1.5 || !math.IsInf(float64(floats[1]), -1) {
		t.Errorf("portable decode: %v %v", ints, floats)
	}
	if _, ok := v.Tensors[1].Float32View(); ok {
		t.Error("Float32View claimed to work on a big-endian host")
	}
}
