package data

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	good := map[string]Spec{
		"synthetic":            {Kind: "synthetic", Seed: DefaultSeed},
		"synthetic:42":         {Kind: "synthetic", Seed: 42},
		"criteo:day_0":         {Kind: "criteo", Path: "day_0"},
		"avazu:/d/a.csv":       {Kind: "avazu", Path: "/d/a.csv"},
		"libsvm:C:\\x:y.svm":   {Kind: "libsvm", Path: "C:\\x:y.svm"},
		"digits:digits.csv.gz": {Kind: "digits", Path: "digits.csv.gz"},
	}
	for in, want := range good {
		got, err := ParseSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if again, err := ParseSpec(got.String()); err != nil || again != got {
			t.Errorf("%q does not parse back: %+v, %v", got.String(), again, err)
		}
	}
	for _, in := range []string{"", "criteo", "criteo:", "parquet:x", "synthetic:-1", "synthetic:x", "Criteo:x"} {
		_, err := ParseSpec(in)
		var se *SpecError
		if !errors.As(err, &se) || se.ExitStatus() != 2 {
			t.Errorf("ParseSpec(%q): error %v, want a *SpecError", in, err)
		}
	}
}

func TestOpenSpecs(t *testing.T) {
	cases := map[string]Schema{
		"synthetic:3": {NumDense: 13, Slots: 26, Vocab: DefaultVocab, Task: TaskCTR},
		"criteo:" + dataFile(t, "criteo_sample.csv"): {NumDense: 13, Slots: 26, Vocab: DefaultVocab, Task: TaskCTR},
		"avazu:" + dataFile(t, "avazu_sample.csv"):   {Slots: 22, Vocab: DefaultVocab, Task: TaskCTR},
		"digits:" + dataFile(t, "digits.csv.gz"):     {NumDense: 64, NumClasses: 10, Task: TaskClassify},
		"libsvm:" + writeFile(t, "a.svm", "1 1:1\n"): {Slots: 1, Vocab: DefaultVocab, Task: TaskCTR},
	}
	for spec, want := range cases {
		src, err := Open(spec, Options{})
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if got := src.Schema(); got != want {
			t.Errorf("%s: schema %+v, want %+v", spec, got, want)
		}
		if _, err := src.Next(context.Background(), 8); err != nil {
			t.Errorf("%s: %v", spec, err)
		}
		src.Close()
	}
	if _, err := Open("criteo:no/such/file", Options{}); err == nil {
		t.Error("a missing file opened")
	}
}

func TestRepeatStartsNewPasses(t *testing.T) {
	spec, err := ParseSpec("criteo:" + dataFile(t, "criteo_sample.csv"))
	if err != nil {
		t.Fatal(err)
	}
	opens := 0
	src, err := Repeat(func() (Source, error) { opens++; return spec.Open(Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	first := readAll(t, mustOpen(t, OpenCriteo, spec.Path, Options{}))
	var sizes []int
	for range 6 {
		b, err := src.Next(context.Background(), 128)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, b.Size)
		if len(sizes) == 3 && sampleKey(b, 0) != sampleKey(first, 0) {
			t.Error("the second pass does not start at the first record")
		}
	}
	if want := []int{128, 72, 128, 72, 128, 72}; opens != 3 || !equalInts(sizes, want) {
		t.Errorf("%d opens, batch sizes %v; want 3 and %v", opens, sizes, want)
	}
}

func TestRepeatEndsOnEmptyData(t *testing.T) {
	path := writeFile(t, "empty.csv", "")
	src, err := Repeat(func() (Source, error) { return OpenCriteo(path, Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := src.Next(context.Background(), 4); !errors.Is(err, io.EOF) {
		t.Fatalf("empty data gave %v, want io.EOF", err)
	}
}

func TestRepeatCountsDistinctBadLines(t *testing.T) {
	path := writeFile(t, "b.svm", "1 1:1\nbad\n0 2:1\n")
	src, err := Repeat(func() (Source, error) { return OpenLibsvm(path, Options{SkipBadLines: true}) })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for range 5 {
		if _, err := src.Next(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
	}
	if src.BadLines() != 1 {
		t.Fatalf("%d bad lines after several passes, want 1", src.BadLines())
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRepeatEpochsReportsEachPass(t *testing.T) {
	path := writeFile(t, "e.svm", "1 1:1\n0 2:1\n1 3:1\n")
	var epochs []int
	src, err := RepeatEpochs(func() (Source, error) { return OpenLibsvm(path, Options{}) },
		func(n int) { epochs = append(epochs, n) })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for range 5 { // 3 records in batches of 2, a pass ends short: passes 2 and 3 begin at batches 3 and 5
		if _, err := src.Next(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
	}
	if !equalInts(epochs, []int{2, 3}) {
		t.Fatalf("epochs reported %v, want [2 3]", epochs)
	}
}

func TestMissingFileIsBadInput(t *testing.T) {
	_, err := Open("criteo:"+filepath.Join(t.TempDir(), "absent.csv"), Options{})
	var fe *FileError
	if !errors.As(err, &fe) || fe.ExitStatus() != ExitBadInput || !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), "absent.csv") {
		t.Fatalf("missing file: %v; want a *FileError with status 2 naming the file", err)
	}
}

// TestLibsvmDenseSpec: "libsvm,dense=N:PATH" makes indices 1..N dense
// features with their values, and round-trips through String.
func TestLibsvmDenseSpec(t *testing.T) {
	path := writeFile(t, "d.svm", "1 1:0.5 2:-2 7:1\n0 3:4\n")
	spec, err := ParseSpec("libsvm,dense=3:" + path)
	if err != nil || spec.Dense != 3 || spec.Kind != "libsvm" || spec.Path != path {
		t.Fatalf("ParseSpec: %+v, %v", spec, err)
	}
	if again, err := ParseSpec(spec.String()); err != nil || again != spec {
		t.Fatalf("String %q parses as %+v, %v", spec.String(), again, err)
	}
	src, err := spec.Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := src.Next(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if b.NumDense != 3 || !slices.Equal(b.Dense, []float32{0.5, -2, 0, 0, 0, 4}) || !slices.Equal(b.Bag(0, 0), []int64{3}) || len(b.Bag(1, 0)) != 0 {
		t.Fatalf("batch dense %v (%d), bags %v %v", b.Dense, b.NumDense, b.Bag(0, 0), b.Bag(1, 0))
	}
	for _, bad := range []string{"criteo,dense=3:x", "libsvm,dense=-1:x", "libsvm,dens=3:x", "libsvm,dense=1000000:x"} {
		if _, err := ParseSpec(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
