package data

import (
	"io/fs"
	"os"
	"sync"
	"syscall"
)

// Record marks. A reader that starts at record Start of a file
// (Options.Start: a stage's data segment after a change of its replicas or
// batches, which the dynamic batch controller makes every few seconds)
// passes over every line before it. On a file of hundreds of gigabytes,
// far into a pass, that is minutes of reading at each change. So every
// reader of a plain file (regular, not gzip-compressed) notes where each
// indexEvery-th record's line starts, in an index the process keeps per
// file, and a reader that starts at Start moves to the nearest noted
// record at or before it and passes over fewer than indexEvery lines. A
// process knows the records its readers have reached, and those whose
// marks it loaded (savedmarks.go).
//
// A file is known by its path, device, inode, size and modification
// time, so an index is not used on a file that was replaced or changed; a
// mark is also checked against the file (a newline must precede it)
// before a reader moves to it.

// indexEvery is how many records apart the marks lie.
var indexEvery int64 = 1 << 16

// maxIndexedFiles bounds the files the process keeps marks of; the oldest
// is forgotten first. One file's marks take 16 bytes per indexEvery
// records: 1 MiB for the 4.4 billion records of Criteo's terabyte logs.
const maxIndexedFiles = 64

// recordMark is where a record's line starts: its byte offset and line
// number.
type recordMark struct{ offset, line int64 }

// recordIndex holds a file's marks: marks[j] is that of record
// j*indexEvery. Readers note them in order from the start, or from a mark
// they moved to, so that they stay contiguous.
type recordIndex struct {
	mu    sync.Mutex
	marks []recordMark
}

// note records m as the mark of record j*indexEvery when it extends the
// marks, up to maxSavedMarks of them (64 MiB; further records are read
// from the last).
func (x *recordIndex) note(j int64, m recordMark) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if j == int64(len(x.marks)) && j < maxSavedMarks {
		x.marks = append(x.marks, m)
	}
}

// before returns the furthest mark past the first at or before record
// target, and the mark's ordinal j (its record is j*indexEvery).
func (x *recordIndex) before(target int64) (j int64, m recordMark, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	j = min(target/indexEvery, int64(len(x.marks))-1)
	if j < 1 {
		return 0, recordMark{}, false
	}
	return j, x.marks[j], true
}

// last returns the ordinal of the furthest mark, when there is one past
// the first.
func (x *recordIndex) last() (j int64, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	j = int64(len(x.marks)) - 1
	return j, j >= 1
}

// count is how many marks the index holds.
func (x *recordIndex) count() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.marks)
}

// snapshot returns a copy of the marks.
func (x *recordIndex) snapshot() []recordMark {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]recordMark(nil), x.marks...)
}

// adopt takes marks, marks of the same file from elsewhere (LoadMarks),
// where they reach further than the index's, and returns how many it
// holds from them.
func (x *recordIndex) adopt(marks []recordMark) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(marks) <= len(x.marks) {
		return 0
	}
	x.marks = append(x.marks[:0:0], marks...)
	return len(marks)
}

// forget drops every mark past the first j.
func (x *recordIndex) forget(j int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.marks = x.marks[:min(j, int64(len(x.marks)))]
}

// fileKey identifies a file as it is: the path too, for filesystems
// whose inode numbers do not tell files apart.
type fileKey struct {
	path        string
	dev, ino    uint64
	size, mtime int64
}

var indexes struct {
	sync.Mutex
	byFile map[fileKey]*recordIndex
	order  []fileKey // oldest first
}

// indexOf returns the marks of the file f is open on, nil when the file
// cannot be identified.
func indexOf(f *os.File) *recordIndex {
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	return indexFor(f.Name(), fi)
}

// indexFor returns the marks of the file at path as fi describes it, nil
// when it cannot be identified.
func indexFor(path string, fi fs.FileInfo) *recordIndex {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	key := fileKey{path: path, dev: uint64(st.Dev), ino: uint64(st.Ino), size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	indexes.Lock()
	defer indexes.Unlock()
	if x, ok := indexes.byFile[key]; ok {
		return x
	}
	if indexes.byFile == nil {
		indexes.byFile = map[fileKey]*recordIndex{}
	}
	if len(indexes.order) >= maxIndexedFiles {
		delete(indexes.byFile, indexes.order[0])
		indexes.order = indexes.order[1:]
	}
	x := &recordIndex{}
	indexes.byFile[key] = x
	indexes.order = append(indexes.order, key)
	return x
}
