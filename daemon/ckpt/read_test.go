package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const hostileName = "hostile.safetensors"

// tensorJSON is one header entry.
func tensorJSON(name, dtype, shape string, begin, end int) string {
	return fmt.Sprintf(`%q:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, name, dtype, shape, begin, end)
}

func TestRejectsHostileFiles(t *testing.T) {
	a8 := tensorJSON("a", "F32", "[2]", 0, 8)
	hdr := func(entries ...string) string { return "{" + strings.Join(entries, ",") + "}" }
	data := func(n int) []byte { return make([]byte, n) }
	cases := []struct {
		name   string
		file   []byte
		tensor string // the tensor the error must name; "" for the whole file
		reason string
	}{
		{"shorter than the length", []byte{1, 2, 3}, "", "too short"},
		{"header length over the cap", binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), "", "exceeds the limit"},
		{"header length past the end", rawFile(hdr(a8), data(8))[:30], "", "runs past the end"},
		{"header not UTF-8", rawFile("{\"a\xff\":1}", nil), "", "not valid UTF-8"},
		{"header not an object", rawFile(`[1,2]`, nil), "", "does not start with '{'"},
		{"header with leading space", rawFile(" "+hdr(a8), data(8)), "", "does not start with '{'"},
		{"empty header", rawFile("", nil), "", "does not start with '{'"},
		{"broken JSON", rawFile(`{"a":{"dtype":"F32",}}`, nil), "a", "not valid JSON"},
		{"unterminated JSON", rawFile(`{"a":{"dtype":"F32"`, nil), "a", "not valid JSON"},
		{"data after the object", rawFile(hdr(a8)+"  x", data(8)), "", "data after its JSON object"},
		{"second object", rawFile(hdr(a8)+"{}", data(8)), "", "data after its JSON object"},
		{"duplicate tensor", rawFile(hdr(a8, tensorJSON("a", "F32", "[2]", 8, 16)), data(16)), "a", "appears twice"},
		{"duplicate metadata", rawFile(`{"__metadata__":{},"__metadata__":{}}`, nil), "", "__metadata__ appears twice"},
		{"duplicate metadata key", rawFile(`{"__metadata__":{"k":"1","k":"2"}}`, nil), "", `key "k" appears twice`},
		{"metadata value not a string", rawFile(`{"__metadata__":{"k":1}}`, nil), "", `value of "k" is not a string`},
		{"metadata not an object", rawFile(`{"__metadata__":"x"}`, nil), "", "__metadata__ is not a JSON object"},
		{"metadata null", rawFile(`{"__metadata__":null}`, nil), "", "__metadata__ is not a JSON object"},
		{"entry not an object", rawFile(`{"a":5}`, nil), "a", "not a JSON object"},
		{"empty tensor name", rawFile(hdr(tensorJSON("", "F32", "[2]", 0, 8)), data(8)), "", "empty name"},
		{"duplicate field", rawFile(`{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, data(8)), "a", "dtype appears twice"},
		{"unknown field", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"strides":[1]}}`, data(8)), "a", `unknown field "strides"`},
		{"unknown dtype", rawFile(hdr(tensorJSON("a", "F16", "[4]", 0, 8)), data(8)), "a", `unknown dtype "F16"`},
		{"dtype not a string", rawFile(`{"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}`, data(8)), "a", "dtype is not a string"},
		{"no dtype", rawFile(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, data(8)), "a", "has no dtype"},
		{"no shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, data(8)), "a", "has no shape"},
		{"no offsets", rawFile(`{"a":{"dtype":"F32","shape":[2]}}`, data(8)), "a", "has no data_offsets"},
		{"shape not an array", rawFile(hdr(tensorJSON("a", "F32", "2", 0, 8)), data(8)), "a", "shape is not an array"},
		{"negative dimension", rawFile(hdr(tensorJSON("a", "F32", "[-2]", 0, 8)), data(8)), "a", "shape[0] is negative (-2)"},
		{"fractional dimension", rawFile(hdr(tensorJSON("a", "F32", "[1,2.0]", 0, 8)), data(8)), "a", "shape[1] = 2.0 is not a 64-bit integer"},
		{"exponent dimension", rawFile(hdr(tensorJSON("a", "F32", "[2e0]", 0, 8)), data(8)), "a", "is not a 64-bit integer"},
		{"huge dimension", rawFile(hdr(tensorJSON("a", "F32", "[99999999999999999999]", 0, 8)), data(8)), "a", "is not a 64-bit integer"},
		{"string dimension", rawFile(hdr(tensorJSON("a", "F32", `["2"]`, 0, 8)), data(8)), "a", "shape[0] is not a number"},
		{"nested dimension", rawFile(hdr(tensorJSON("a", "F32", `[[2]]`, 0, 8)), data(8)), "a", "shape[0] is not a number"},
		{"shape product overflow", rawFile(hdr(tensorJSON("a", "F32", "[4611686018427387904,4]", 0, 8)), data(8)), "a", "overflows"},
		{"too many dimensions", rawFile(hdr(tensorJSON("a", "F32", "["+strings.Repeat("1,", 64)+"1]", 0, 4)), data(4)), "a", "more than 64 entries"},
		{"one offset", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}}`, data(8)), "a", "has 1 numbers, not 2"},
		{"three offsets", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}`, data(8)), "a", "more than 2 entries"},
		{"negative offset", rawFile(hdr(tensorJSON("a", "F32", "[2]", -8, 0)), data(8)), "a", "data_offsets[0] is negative"},
		{"offsets out of order", rawFile(hdr(tensorJSON("a", "F32", "[2]", 8, 0)), data(8)), "a", "out of order"},
		{"offsets past the end", rawFile(hdr(a8), data(4)), "a", "run past the end of the file"},
		{"bytes not matching shape", rawFile(hdr(tensorJSON("a", "F32", "[3]", 0, 8)), data(8)), "a", "hold 8 bytes, but shape [3] of F32 needs 12"},
		{"I64 size", rawFile(hdr(tensorJSON("a", "I64", "[2]", 0, 8)), data(8)), "a", "shape [2] of I64 needs 16"},
		{"overlap", rawFile(hdr(a8, tensorJSON("b", "F32", "[2]", 4, 12)), data(12)), "b", `overlaps tensor "a"`},
		{"empty tensor inside another", rawFile(hdr(a8, tensorJSON("z", "F32", "[0]", 4, 4)), data(8)), "z", `overlaps tensor "a"`},
		{"gap", rawFile(hdr(a8, tensorJSON("b", "F32", "[2]", 12, 20)), data(20)), "b", "gap of 4 bytes"},
		{"data not starting at 0", rawFile(hdr(tensorJSON("a", "F32", "[2]", 4, 12)), data(12)), "a", "gap of 4 bytes between the start of the data section"},
		{"trailing bytes", rawFile(hdr(a8), data(12)), "", "4 trailing bytes"},
		{"data without tensors", rawFile(`{}`, data(1)), "", "1 trailing bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.file), int64(len(c.file)), hostileName)
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a *FormatError", err)
			}
			if fe.File != hostileName || fe.Tensor != c.tensor || !strings.Contains(fe.Reason, c.reason) {
				t.Fatalf("got file %q tensor %q reason %q; want tensor %q, reason containing %q", fe.File, fe.Tensor, fe.Reason, c.tensor, c.reason)
			}
			msg := err.Error()
			if !strings.Contains(msg, hostileName) || (c.tensor != "" && !strings.Contains(msg, fmt.Sprintf("%q", c.tensor))) {
				t.Fatalf("message %q does not name the file and the tensor", msg)
			}
		})
	}
}

// A valid header with tensors in any order, and an empty file of tensors,
// are accepted: the checks above are not over-strict.
func TestAcceptsValidVariants(t *testing.T) {
	for name, file := range map[string][]byte{
		"no tensors":                rawFile(`{}`, nil),
		"metadata only":             rawFile(`{"__metadata__":{"k":"v"}}`, nil),
		"entries out of data order": rawFile("{"+tensorJSON("b", "F32", "[1]", 4, 8)+","+tensorJSON("a", "F32", "[1]", 0, 4)+"}", le32(1, 2)),
		"empty tensors at one offset": rawFile("{"+tensorJSON("x", "F32", "[0]", 4, 4)+","+tensorJSON("a", "F32", "[1]", 0, 4)+","+
			tensorJSON("y", "I64", "[3,0]", 4, 4)+"}", le32(1)),
	} {
		if _, err := NewReader(bytes.NewReader(file), int64(len(file)), name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// recordingReaderAt logs every range read, to show what the reader touches.
type recordingReaderAt struct {
	r     io.ReaderAt
	mu    sync.Mutex
	reads [][2]int64
}

func (r *recordingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	r.reads = append(r.reads, [2]int64{off, off + int64(len(p))})
	r.mu.Unlock()
	return r.r.ReadAt(p, off)
}

func (r *recordingReaderAt) take() [][2]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reads
	r.reads = nil
	return out
}

// A header length over the cap is refused after reading just the 8 length
// bytes, before the header is allocated or read.
func TestHeaderCapCheckedBeforeReading(t *testing.T) {
	lie := binary.LittleEndian.AppendUint64(nil, 1<<40)
	rec := &recordingReaderAt{r: bytes.NewReader(append(lie, make([]byte, 64)...))}
	_, err := NewReader(rec, 1<<41, hostileName) // claims a size that fits the length
	wantErrContains(t, err, "exceeds the limit")
	if reads := rec.take(); !slices.Equal(reads, [][2]int64{{0, 8}}) {
		t.Errorf("reads = %v, want only the length bytes", reads)
	}
}

// Opening reads the length and the header only; reading a tensor reads only
// that tensor's byte range.
func TestReadsOnlyTheTensorRange(t *testing.T) {
	data := mustWrite(t, nil, []Tensor{
		Float32("a", []int64{100}, make([]float32, 100)),
		Float32("b", []int64{50}, make([]float32, 50)),
		Int64("c", []int64{10}, make([]int64, 10)),
	})
	rec := &recordingReaderAt{r: bytes.NewReader(data)}
	f, err := NewReader(rec, int64(len(data)), "mem")
	if err != nil {
		t.Fatal(err)
	}
	if reads := rec.take(); !slices.Equal(reads, [][2]int64{{0, 8}, {8, f.dataAt}}) {
		t.Errorf("open read %v, want the length and the header only", reads)
	}
	for _, info := range f.Tensors() {
		switch info.DType {
		case F32:
			_, err = f.Float32(info.Name)
		case I64:
			_, err = f.Int64(info.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := f.dataAt+info.Begin, f.dataAt+info.End
		for _, r := range rec.take() {
			if r[0] < lo || r[1] > hi {
				t.Errorf("reading %q touched [%d, %d), outside its range [%d, %d)", info.Name, r[0], r[1], lo, hi)
			}
		}
	}
}

func TestReadIntoBuffers(t *testing.T) {
	vals := make([]float32, 1000)
	for i := range vals {
		vals[i] = float32(i)
	}
	ids := []int64{5, -6, 7}
	f := mustReader(t, mustWrite(t, nil, []Tensor{Float32("v", []int64{100, 10}, vals), Int64("ids", []int64{3}, ids)}))

	dst := make([]float32, 1000)
	if err := f.ReadFloat32("v", dst); err != nil || !slices.Equal(dst, vals) {
		t.Fatalf("ReadFloat32 = %v", err)
	}
	// In pieces of 7 rows: what a restore of a large table does.
	var pieces []float32
	chunk := make([]float32, 70)
	for off := int64(0); off < 1000; off += 70 {
		n := min(int64(70), 1000-off)
		if err := f.ReadFloat32At("v", chunk[:n], off); err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, chunk[:n]...)
	}
	if !slices.Equal(pieces, vals) {
		t.Error("reading in pieces differs from the whole")
	}
	gotIDs := make([]int64, 2)
	if err := f.ReadInt64At("ids", gotIDs, 1); err != nil || !slices.Equal(gotIDs, ids[1:]) {
		t.Errorf("ReadInt64At = %v, %v", gotIDs, err)
	}
	sec, info, err := f.Section("ids")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(sec)
	if err != nil || !bytes.Equal(raw, le64(ids...)) || info.NumElements() != 3 {
		t.Errorf("Section = %v, %+v, %v", raw, info, err)
	}

	wantErrContains(t, f.ReadFloat32("v", make([]float32, 999)), "has 1000 elements, buffer holds 999")
	wantErrContains(t, f.ReadInt64("ids", make([]int64, 4)), "has 3 elements, buffer holds 4")
	wantErrContains(t, f.ReadFloat32At("v", make([]float32, 2), 999), "cannot read 2 from element 999")
	wantErrContains(t, f.ReadFloat32At("v", make([]float32, 1), -1), "cannot read 1 from element -1")
	wantErrContains(t, f.ReadInt64("v", make([]int64, 1000)), `tensor "v" is F32, not I64`)
	_, err = f.Float32("ids")
	wantErrContains(t, err, `tensor "ids" is I64, not F32`)
	if _, err := f.Float32("nope"); !errors.Is(err, errMissingTensor) {
		t.Errorf("missing tensor: %v", err)
	}
	if _, _, err := f.Section("nope"); !errors.Is(err, errMissingTensor) {
		t.Errorf("missing tensor section: %v", err)
	}
}

// A file that shrinks after it was opened gives a read error, not garbage.
func TestReadOfTruncatedFileFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if _, err := WriteFile(path, nil, []Tensor{Float32("v", []int64{1000}, make([]float32, 1000))}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(path, f.dataAt+100); err != nil {
		t.Fatal(err)
	}
	_, err = f.Float32("v")
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("error %v, want io.ErrUnexpectedEOF", err)
	}
	wantErrContains(t, err, `tensor "v": read`)
}

func TestOpenNamesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(path, rawFile(`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, make([]byte, 8)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path)
	wantErrContains(t, err, "checkpoint "+path+`: tensor "a": unknown dtype "F64"`)
	_, err = Open(filepath.Join(t.TempDir(), "missing"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestCheckModel(t *testing.T) {
	write := func(meta map[string]string) string {
		path := filepath.Join(t.TempDir(), "m.safetensors")
		if _, err := WriteFile(path, meta, nil); err != nil {
			t.Fatal(err)
		}
		return path
	}
	open := func(path string) *File {
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}

	path := write(NewMetadata("matchnet", 7))
	f := open(path)
	if err := f.CheckModel("matchnet"); err != nil {
		t.Errorf("same model: %v", err)
	}
	err := f.CheckModel("ctrdnn")
	var mm *ModelMismatchError
	if !errors.As(err, &mm) || mm.Got != "matchnet" || mm.Want != "ctrdnn" {
		t.Fatalf("other model: %v", err)
	}
	if want := "checkpoint " + path + " is of model matchnet, not ctrdnn"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}

	wantErrContains(t, open(write(map[string]string{"x": "y"})).CheckModel("ctrdnn"), "has no heterps.model metadata")
	newer := NewMetadata("ctrdnn", 1)
	newer[KeyFormatVersion] = "2"
	wantErrContains(t, open(write(newer)).CheckModel("ctrdnn"), `format version "2"`)

	_, err = open(write(map[string]string{KeyStep: "-3"})).Step()
	wantErrContains(t, err, "not a step number")
	_, err = open(write(nil)).Step()
	wantErrContains(t, err, "has no heterps.step metadata")
}

// Accessors return copies: a caller cannot change what the File holds.
func TestAccessorsReturnCopies(t *testing.T) {
	f := mustReader(t, mustWrite(t, map[string]string{"k": "v"}, []Tensor{Float32("a", []int64{2}, []float32{1, 2})}))
	f.Metadata()["k"] = "changed"
	info, _ := f.Tensor("a")
	info.Shape[0] = 99
	f.Tensors()[0].Shape[0] = 98
	if v, _ := f.Meta("k"); v != "v" {
		t.Error("Metadata() shares the file's map")
	}
	if info, _ := f.Tensor("a"); info.Shape[0] != 2 {
		t.Error("Tensor() or Tensors() shares the file's shape")
	}
}

// Concurrent reads of one File are safe (run with -race).
func TestConcurrentReads(t *testing.T) {
	vals := randFloats(rand.New(rand.NewPCG(3, 4)), 4096)
	f := mustReader(t, mustWrite(t, nil, []Tensor{Float32("v", []int64{4096}, vals)}))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := f.Float32("v")
			if err == nil && !slices.Equal(got, vals) {
				err = errors.New("concurrent read differs")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestOpenRefusesWhatIsNotAFile: a named pipe (which a plain open would
// wait on for a writer, forever), a directory and a device are refused at
// once, each by name.
func TestOpenRefusesWhatIsNotAFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ckpt.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "a named pipe", t.TempDir(): "a directory", "/dev/null": "a device"} {
		done := make(chan error, 1)
		go func() {
			_, err := Open(path)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Open(%s) = %v, want an error naming it and %q", path, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Open(%s) is still waiting", path)
		}
	}
}
