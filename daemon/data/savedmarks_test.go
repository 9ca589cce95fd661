package data

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSavedMarksReachAnotherProcess: marks saved by one process let a
// reader of another (its marks forgotten here) start far into the file
// as the first process's readers do, reading what an unmarked reader reads;
// marks of a file changed since, or none saved, are not taken.
func TestSavedMarksReachAnotherProcess(t *testing.T) {
	smallMarks(t)
	t.Cleanup(ForgetMarks)
	content := criteoLines(t)
	path := writeFile(t, "criteo.csv", content)
	spec, dir := "criteo:"+path, t.TempDir()
	if n, err := SaveMarks(spec, dir); n != 0 || err != nil {
		t.Fatalf("before any reading: %d marks saved (%v), want none", n, err)
	}
	readAll(t, mustOpen(t, OpenCriteo, path, Options{}), 13)
	saved, err := SaveMarks(spec, dir)
	if saved < 20 || err != nil {
		t.Fatalf("%d marks saved (%v), want the 25 of 200 records", saved, err)
	}
	ForgetMarks()
	if n, err := LoadMarks(spec, dir); n != saved || err != nil {
		t.Fatalf("%d marks loaded (%v), want %d", n, err, saved)
	}
	src := mustOpen(t, OpenCriteo, path, Options{Start: 150, Shard: 1, Shards: 2})
	first, err := src.Next(context.Background(), 1)
	if err != nil || scanned(src) > 12 {
		t.Fatalf("first record after %d lines read (%v), want at most 12", scanned(src), err)
	}
	got := readAll(t, src, 7)
	appendBatch(first, got)
	want := readAll(t, mustOpen(t, OpenCriteo, writeFile(t, "copy.csv", content), Options{Start: 150, Shard: 1, Shards: 2}), 7)
	if first.Size != want.Size || sampleKey(first, 0) != sampleKey(want, 0) || sampleKey(first, first.Size-1) != sampleKey(want, want.Size-1) {
		t.Fatalf("%d samples, want %d, or others", first.Size, want.Size)
	}

	ForgetMarks()
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if n, err := LoadMarks(spec, dir); n != 0 || err != nil {
		t.Errorf("a file touched since: %d marks loaded (%v), want none", n, err)
	}
	if n, err := LoadMarks(spec, t.TempDir()); n != 0 || err != nil {
		t.Errorf("none saved: %d marks loaded (%v), want none and no error", n, err)
	}
	if n, err := LoadMarks("synthetic:1", dir); n != 0 || err != nil {
		t.Errorf("a generator: %d marks loaded (%v)", n, err)
	}
	fifo := mkfifo(t)
	if n, err := SaveMarks("criteo:"+fifo, dir); n != 0 || err != nil { // must not wait for a writer
		t.Errorf("a FIFO: %d marks saved (%v)", n, err)
	}
}

// TestDamagedSavedMarksAreRefused: a marks file whose marks could not be
// a file's (out of the file, out of order), or that is not JSON, is an
// error naming it; nothing is taken from it.
func TestDamagedSavedMarksAreRefused(t *testing.T) {
	smallMarks(t)
	t.Cleanup(ForgetMarks)
	path := writeFile(t, "criteo.csv", criteoLines(t))
	spec, dir := "criteo:"+path, t.TempDir()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	good := savedMarks{Path: path, Size: fi.Size(), MTime: fi.ModTime().UnixNano(), Every: indexEvery,
		Marks: [][2]int64{{0, 2}, {900, 11}, {1800, 20}}}
	for name, damage := range map[string]func(m *savedMarks){
		"beyond the file": func(m *savedMarks) { m.Marks[2][0] = fi.Size() },
		"out of order":    func(m *savedMarks) { m.Marks[1], m.Marks[2] = m.Marks[2], m.Marks[1] },
		"line 0":          func(m *savedMarks) { m.Marks[0][1] = 0 },
	} {
		bad := good
		bad.Marks = append([][2]int64(nil), good.Marks...)
		damage(&bad)
		if err := writeMarks(marksFile(dir, path), bad); err != nil {
			t.Fatal(err)
		}
		ForgetMarks()
		if n, err := LoadMarks(spec, dir); n != 0 || err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %d marks loaded (%v), want an error naming the data file", name, n, err)
		}
	}
	if err := os.Remove(marksFile(dir, path)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(marksFile(dir, path), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := LoadMarks(spec, dir); n != 0 || err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO in its place: %d marks loaded (%v), want an error at once", n, err)
	}
	os.Remove(marksFile(dir, path))
	if err := os.WriteFile(marksFile(dir, path), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := LoadMarks(spec, dir); n != 0 || err == nil || !strings.Contains(err.Error(), filepath.Join(dir, MarksDir)) {
		t.Errorf("not JSON: %d marks loaded (%v), want an error naming the marks file", n, err)
	}
}
