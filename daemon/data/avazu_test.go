package data

import (
	"reflect"
	"strings"
	"testing"
)

func TestAvazuLoadsEveryRow(t *testing.T) {
	path := dataFile(t, "avazu_sample.csv")
	src := mustOpen(t, OpenAvazu, path, Options{Vocab: 1 << 20})
	if s := src.Schema(); s.Slots != 22 || s.NumDense != 0 || s.Task != TaskCTR {
		t.Fatalf("schema %+v", s)
	}
	b := readAll(t, src, 30)
	if b.Size != 100 {
		t.Fatalf("%d samples, want 100", b.Size)
	}
	// First row: id,click=0,hour=14102100,C1=1005,banner_pos=0,site_id=1fbe01fe,...
	want := []int64{HashID(0, []byte("00"), 1<<20), HashID(1, []byte("1005"), 1<<20), HashID(2, []byte("0"), 1<<20), HashID(3, []byte("1fbe01fe"), 1<<20)}
	if got := b.IDs[:4]; b.Labels[0] != 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("first row label %v ids %v, want 0 and %v", b.Labels[0], got, want)
	}
	lines := readLines(t, path)
	for i, line := range lines[1:] {
		if click := strings.Split(line, ",")[1]; float32(click[0]-'0') != b.Labels[i] {
			t.Fatalf("row %d: label %v, file says %s", i, b.Labels[i], click)
		}
	}
}

func TestAvazuMalformedLines(t *testing.T) {
	lines := readLines(t, dataFile(t, "avazu_sample.csv"))
	breaks := []struct {
		line  int
		col   int
		value string
		field string
	}{
		{5, 1, "yes", "click"},
		{9, 2, "141021", "hour"},
		{12, 2, "14102125", "hour"},
		{20, -1, "", ""}, // a field dropped
	}
	for _, br := range breaks {
		f := strings.Split(lines[br.line-1], ",")
		if br.col < 0 {
			f = f[:len(f)-1]
		} else {
			f[br.col] = br.value
		}
		lines[br.line-1] = strings.Join(f, ",")
	}
	path := writeFile(t, "avazu.csv", strings.Join(lines, "\n"))
	le := lineErrorOf(t, mustOpen(t, OpenAvazu, path, Options{}))
	if le.Line != 5 || le.Field != "click" {
		t.Errorf("got %v, want line 5 field click", le)
	}
	src := mustOpen(t, OpenAvazu, path, Options{SkipBadLines: true})
	if b := readAll(t, src); b.Size != 100-len(breaks) || src.BadLines() != int64(len(breaks)) {
		t.Errorf("%d samples, %d bad lines; want %d and %d", b.Size, src.BadLines(), 100-len(breaks), len(breaks))
	}
}
