package nn

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// hugeModel is ctrdnn's shape with a vocabulary of vocab rows and an NCE
// output layer of classes rows.
func hugeModel(t testing.TB, vocab int64, classes int) *config.Model {
	t.Helper()
	src := fmt.Sprintf(`version = 1
name = "huge"
task = "nce"
[input]
dense = 13
slots = 26
vocab = %d
[[layer]]
kind = "embedding"
dim = 9
[[layer]]
kind = "concat"
[[layer]]
kind = "fc"
out = 64
act = "relu"
[[layer]]
kind = "nce"
classes = %d
negatives = 8
[loss]
kind = "nce"
`, vocab, classes)
	m, err := config.ParseModel("huge.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBuildRefusesTablesTooLargeForOneProcess(t *testing.T) {
	cfg := hugeModel(t, 1e12, 100)
	_, err := Build(native.MustCPU(), cfg, 1)
	want := fmt.Sprint(int64(1e12)*9*4 + 100*65*4)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), want+" bytes") {
		t.Fatalf("got %v, want ErrTooLarge naming %s bytes", err, want)
	}
}

func TestBuildRespectsMaxTableBytes(t *testing.T) {
	cfg := hugeModel(t, 1000, 100)
	need := int64(1000*9*4 + 100*65*4)
	if _, err := BuildWith(native.MustCPU(), cfg, 1, BuildOptions{MaxTableBytes: need - 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte under: got %v", err)
	}
	if _, err := BuildWith(native.MustCPU(), cfg, 1, BuildOptions{MaxTableBytes: need}); err != nil {
		t.Fatalf("exactly enough: %v", err)
	}
}

// heapAfter returns the Go heap in use after build, with build's result
// still reachable.
func heapAfter(t *testing.T, build func() (*Model, error)) (uint64, *Model) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := build()
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)
	return after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc), m
}

func TestRemoteTablesBuildsA2to31RowVocabularyInBoundedMemory(t *testing.T) {
	cfg := hugeModel(t, 1<<31, 1<<31)
	grown, m := heapAfter(t, func() (*Model, error) {
		return BuildWith(native.MustCPU(), cfg, 1, BuildOptions{RemoteTables: true})
	})
	if grown > 256<<20 {
		t.Fatalf("building with remote tables grew the heap by %d bytes", grown)
	}
	for _, p := range m.Params() {
		if p.Sparse && (p.Rows != 0 || p.Value.Len() != 0) {
			t.Errorf("%s holds %d rows", p.Name, p.Rows)
		}
		if p.Sparse && p.Cols == 0 {
			t.Errorf("%s lost its width", p.Name)
		}
	}
}

func TestDenseLayersLeavesOtherLayersEmpty(t *testing.T) {
	cfg := loadZoo(t, "ctrdnn")
	full, err := Build(native.MustCPU(), cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	part, err := BuildWith(native.MustCPU(), cfg, 3, BuildOptions{RemoteTables: true, DenseLayers: &LayerRange{First: 3, Last: 4}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range part.NumLayers() {
		for j, p := range part.LayerParams(i) {
			if p.Sparse {
				continue
			}
			want := full.LayerParams(i)[j]
			if i < 3 || i > 4 {
				if p.Value.Len() != 0 || p.Grad.Len() != 0 || p.Rows != want.Rows || p.Cols != want.Cols {
					t.Errorf("layer %d %s: %d values, %dx%d", i, p.Name, p.Value.Len(), p.Rows, p.Cols)
				}
				continue
			}
			got, _ := native.Host(p.Value)
			exp, _ := native.Host(want.Value)
			if !equalFloats(got, exp) {
				t.Errorf("layer %d %s: values differ from the whole build", i, p.Name)
			}
		}
	}
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
