package data

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestCriteoCSVLoadsEveryRow(t *testing.T) {
	src := mustOpen(t, OpenCriteo, dataFile(t, "criteo_sample.csv"), Options{})
	b := readAll(t, src, 64)
	if b.Size != 200 {
		t.Fatalf("%d samples, want 200", b.Size)
	}
	// First data row: 0,,3,260.0,,17668.0,...,05db9164,08d6d899,...
	want := []float32{0, float32(math.Log1p(3)), float32(math.Log1p(260)), 0, float32(math.Log1p(17668))}
	if got := b.Dense[:5]; !reflect.DeepEqual(got, want) {
		t.Errorf("first row dense %v, want %v", got, want)
	}
	if got, want := b.Bag(0, 0), []int64{HashID(0, []byte("05db9164"), DefaultVocab)}; !reflect.DeepEqual(got, want) {
		t.Errorf("first row C1 %v, want %v", got, want)
	}
	if got, want := b.Bag(0, 25), []int64{HashID(25, nil, DefaultVocab)}; !reflect.DeepEqual(got, want) {
		t.Errorf("first row empty C26 %v, want the slot's missing id %v", got, want)
	}
	// Second row has I2 = -1, clamped to 0.
	if got := b.Dense[criteoDense+1]; got != 0 {
		t.Errorf("negative integer became %v, want 0", got)
	}
	clicks := 0
	for _, y := range b.Labels {
		clicks += int(y)
	}
	if clicks == 0 || clicks == 200 {
		t.Errorf("%d clicks in 200 rows: labels not read", clicks)
	}
}

func TestCriteoTSVMatchesCSV(t *testing.T) {
	csvPath := dataFile(t, "criteo_sample.csv")
	lines := readLines(t, csvPath)
	tsv := strings.ReplaceAll(strings.Join(lines[1:], "\n"), ",", "\t") + "\n"

	want := readAll(t, mustOpen(t, OpenCriteo, csvPath, Options{}))
	for name, path := range map[string]string{
		"tsv":    writeFile(t, "day_0", tsv),
		"tsv.gz": writeGzip(t, "day_0.gz", tsv),
		"crlf":   writeFile(t, "crlf.csv", strings.Join(lines, "\r\n")),
	} {
		got := readAll(t, mustOpen(t, OpenCriteo, path, Options{}), 7, 100, 1)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: batches differ from the CSV's", name)
		}
	}
}

func TestCriteoLastLineWithoutNewline(t *testing.T) {
	lines := readLines(t, dataFile(t, "criteo_sample.csv"))
	src := mustOpen(t, OpenCriteo, writeFile(t, "c.csv", strings.Join(lines, "\n")), Options{})
	if b := readAll(t, src); b.Size != 200 {
		t.Fatalf("%d samples, want 200", b.Size)
	}
	truncated := strings.Join(lines, "\n")
	truncated = truncated[:len(truncated)-30]
	src = mustOpen(t, OpenCriteo, writeFile(t, "t.csv", truncated), Options{})
	if le := lineErrorOf(t, src); le.Line != 201 {
		t.Fatalf("truncated last line reported as %v, want line 201", le)
	}
}

// corruptCriteo returns the sample with some lines broken, and the 1-based
// line numbers and fields the reader must report.
func corruptCriteo(t *testing.T) (lines []string, bad []LineError) {
	lines = readLines(t, dataFile(t, "criteo_sample.csv"))
	set := func(line, col int, v string) {
		f := strings.Split(lines[line-1], ",")
		f[col] = v
		lines[line-1] = strings.Join(f, ",")
	}
	lines[10] = lines[10][:len(lines[10])/2] // line 11 truncated
	bad = append(bad, LineError{Line: 11})
	set(21, 16, "zz0429f8") // C3
	bad = append(bad, LineError{Line: 21, Field: "C3"})
	lines[30] += ",extra" // line 31
	bad = append(bad, LineError{Line: 31})
	set(41, 0, "2")
	bad = append(bad, LineError{Line: 41, Field: "label"})
	set(51, 5, "12abc") // I5
	bad = append(bad, LineError{Line: 51, Field: "I5"})
	set(61, 20, "0123456789abcdef0") // C7, 17 hex digits
	bad = append(bad, LineError{Line: 61, Field: "C7"})
	return lines, bad
}

func TestCriteoMalformedLinesNameTheLine(t *testing.T) {
	lines, bad := corruptCriteo(t)
	for _, want := range bad {
		// A copy where only this line is broken.
		good := readLines(t, dataFile(t, "criteo_sample.csv"))
		good[want.Line-1] = lines[want.Line-1]
		path := writeFile(t, "bad.csv", strings.Join(good, "\n")+"\n")
		le := lineErrorOf(t, mustOpen(t, OpenCriteo, path, Options{}))
		if le.File != path || le.Line != want.Line || le.Field != want.Field || le.Reason == "" {
			t.Errorf("line %d: got %+v, want line %d field %q", want.Line, *le, want.Line, want.Field)
		}
		if !strings.HasPrefix(le.Error(), path+":"+strconv.FormatInt(want.Line, 10)+":") {
			t.Errorf("message %q does not start with file:line", le.Error())
		}
		if le.ExitStatus() != 2 {
			t.Errorf("exit status %d, want 2", le.ExitStatus())
		}
	}
}

func TestCriteoSkipBadLinesCounts(t *testing.T) {
	lines, bad := corruptCriteo(t)
	path := writeFile(t, "bad.csv", strings.Join(lines, "\n")+"\n")
	src := mustOpen(t, OpenCriteo, path, Options{SkipBadLines: true})
	b := readAll(t, src, 32)
	if b.Size != 200-len(bad) || src.BadLines() != int64(len(bad)) {
		t.Fatalf("%d samples and %d bad lines, want %d and %d", b.Size, src.BadLines(), 200-len(bad), len(bad))
	}
}

func TestCriteoErrorIsSticky(t *testing.T) {
	lines, _ := corruptCriteo(t)
	src := mustOpen(t, OpenCriteo, writeFile(t, "bad.csv", strings.Join(lines, "\n")), Options{})
	first := lineErrorOf(t, src)
	_, err := src.Next(t.Context(), 10)
	var again *LineError
	if !errors.As(err, &again) || *again != *first {
		t.Fatalf("after %v, Next returned %v", first, err)
	}
}

func TestCriteoBadHeader(t *testing.T) {
	path := writeFile(t, "h.csv", "label,I1,I2\n0,1,2\n")
	le := lineErrorOf(t, mustOpen(t, OpenCriteo, path, Options{SkipBadLines: true}))
	if le.Line != 1 {
		t.Fatalf("got %v, want an error on line 1", le)
	}
}

func TestOpenMissingFile(t *testing.T) {
	if _, err := OpenCriteo("no/such/file", Options{}); err == nil {
		t.Fatal("no error for a missing file")
	}
}
