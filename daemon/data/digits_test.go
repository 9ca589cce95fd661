package data

import (
	"reflect"
	"strings"
	"testing"
)

func TestDigitsLoadsEveryRow(t *testing.T) {
	path := dataFile(t, "digits.csv.gz")
	src := mustOpen(t, OpenDigits, path, Options{})
	if s := src.Schema(); s.NumDense != 64 || s.Slots != 0 || s.NumClasses != 10 || s.Task != TaskClassify {
		t.Fatalf("schema %+v", s)
	}
	b := readAll(t, src, 256, 100)
	if b.Size != 1797 {
		t.Fatalf("%d samples, want 1797", b.Size)
	}
	var perClass [10]int
	for i, c := range b.Classes {
		perClass[c]++
		if b.Labels[i] != float32(c) {
			t.Fatalf("sample %d: label %v, class %d", i, b.Labels[i], c)
		}
	}
	for c, n := range perClass {
		if n < 100 {
			t.Errorf("class %d has %d samples", c, n)
		}
	}
	// First row: 0,0,5,13,9,1,...
	if got, want := b.Dense[:4], []float32{0, 0, 5.0 / 16, 13.0 / 16}; !reflect.DeepEqual(got, want) {
		t.Errorf("first pixels %v, want %v", got, want)
	}
	for i, v := range b.Dense {
		if v < 0 || v > 1 {
			t.Fatalf("pixel %d = %v outside [0, 1]", i, v)
		}
	}

	plain := writeFile(t, "digits.csv", strings.Join(readLines(t, path), "\n"))
	if got := readAll(t, mustOpen(t, OpenDigits, plain, Options{})); !reflect.DeepEqual(got, b) {
		t.Error("the uncompressed file reads differently")
	}
}

func TestDigitsMalformedLines(t *testing.T) {
	lines := readLines(t, dataFile(t, "digits.csv.gz"))[:20]
	lines[3] += ",0" // too many fields
	f := strings.Split(lines[6], ",")
	f[64] = "10"
	lines[6] = strings.Join(f, ",")
	f = strings.Split(lines[9], ",")
	f[2] = "17"
	lines[9] = strings.Join(f, ",")
	path := writeFile(t, "d.csv", strings.Join(lines, "\n"))
	src := mustOpen(t, OpenDigits, path, Options{SkipBadLines: true})
	if b := readAll(t, src); b.Size != 17 || src.BadLines() != 3 {
		t.Errorf("%d samples, %d bad lines; want 17 and 3", b.Size, src.BadLines())
	}
	le := lineErrorOf(t, mustOpen(t, OpenDigits, path, Options{}))
	if le.Line != 4 {
		t.Errorf("got %v, want line 4", le)
	}
}
