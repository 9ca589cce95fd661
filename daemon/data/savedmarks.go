package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/ckpt"
)

// Saved marks. The marks a process notes die with it, and a restored
// replica on a node that has not read the file — a new node after a
// failure — would read up to twice over it to find where its stage had
// got to. SaveMarks writes a process's marks of a file into a directory
// the job keeps (its checkpoint directory), and LoadMarks gives them to
// another process, when they are of the file as it is there: the same
// path, size and modification time (a shared filesystem's file, or a copy
// that kept its time), and the same spacing.

// MarksDir is the folder of a checkpoint directory that holds saved marks.
const MarksDir = "data-marks"

// maxSavedMarks bounds a marks file that LoadMarks reads: 2^22 marks are a
// file of 2^38 records (some 30 TB of Criteo lines), about 170 MB of JSON.
const maxSavedMarks = 1 << 22

// savedMarks is a marks file.
type savedMarks struct {
	Path  string     `json:"path"`
	Size  int64      `json:"size"`
	MTime int64      `json:"mtime_ns"`
	Every int64      `json:"every"`
	Marks [][2]int64 `json:"marks"` // offset and line number of record j*Every
}

// marksFile is where dir holds the marks of the file at path.
func marksFile(dir, path string) string {
	h := fnv.New64a()
	io.WriteString(h, path)
	return filepath.Join(dir, MarksDir, fmt.Sprintf("%016x.json", h.Sum64()))
}

// NotedMarks is how many marks this process holds of the file spec reads:
// a saver writes them again only when they grew.
func NotedMarks(spec string) int {
	_, _, x := specMarks(spec)
	if x == nil {
		return 0
	}
	return x.count()
}

// SaveMarks writes the marks this process has noted of the file spec reads
// into dir's MarksDir, through a temporary file renamed over the last, and
// reports how many; none (and nothing written) for a generator or a file
// read through gzip or as a FIFO.
func SaveMarks(spec, dir string) (int, error) {
	path, fi, x := specMarks(spec)
	if x == nil {
		return 0, nil
	}
	marks := x.snapshot()
	if len(marks) < 2 {
		return 0, nil
	}
	saved := savedMarks{Path: path, Size: fi.Size(), MTime: fi.ModTime().UnixNano(), Every: indexEvery, Marks: make([][2]int64, len(marks))}
	for i, m := range marks {
		saved.Marks[i] = [2]int64{m.offset, m.line}
	}
	return len(marks), writeMarks(marksFile(dir, path), saved)
}

// writeMarks writes saved to path whole (ckpt.WriteAtomic).
func writeMarks(path string, saved savedMarks) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("data: save marks: %w", err)
	}
	if err := ckpt.WriteAtomic(path, func(w io.Writer) error { return json.NewEncoder(w).Encode(saved) }); err != nil {
		return fmt.Errorf("data: save marks: %w", err)
	}
	return nil
}

// LoadMarks gives this process the marks dir's MarksDir holds of the file
// spec reads, when they are of that file as it is now and reach further
// than those the process has; it reports how many it took. Marks of
// another file, or none saved, are not an error: the reader reads as it
// would without them.
func LoadMarks(spec, dir string) (int, error) {
	path, fi, x := specMarks(spec)
	if x == nil {
		return 0, nil
	}
	saved, err := readMarks(marksFile(dir, path))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if saved.Path != path || saved.Size != fi.Size() || saved.MTime != fi.ModTime().UnixNano() || saved.Every != indexEvery {
		return 0, nil // another file, or this one changed since
	}
	marks, err := checkSavedMarks(saved)
	if err != nil {
		return 0, fmt.Errorf("data: marks of %s in %s: %w", path, dir, err)
	}
	return x.adopt(marks), nil
}

// readMarks reads a marks file, refusing one larger than maxSavedMarks
// could make, or one that is not a regular file (config.ReadFileLimited:
// a FIFO in its place would hold the replica up until a writer came).
func readMarks(path string) (savedMarks, error) {
	var saved savedMarks
	const maxBytes = maxSavedMarks*40 + 4096 // "[offset,line],": two 16-digit numbers and punctuation
	b, err := config.ReadFileLimited(path, maxBytes)
	if err != nil {
		return saved, err
	}
	if err := json.Unmarshal(b, &saved); err != nil {
		return saved, fmt.Errorf("data: %s: %w", path, err)
	}
	return saved, nil
}

// checkSavedMarks turns saved's marks into the index's, checking that
// they could be a file's: offsets and line numbers ascending, the first
// record at or after the first line, every offset within the file.
func checkSavedMarks(saved savedMarks) ([]recordMark, error) {
	if len(saved.Marks) > maxSavedMarks {
		return nil, fmt.Errorf("%d marks, want at most %d", len(saved.Marks), maxSavedMarks)
	}
	marks := make([]recordMark, len(saved.Marks))
	for i, m := range saved.Marks {
		marks[i] = recordMark{offset: m[0], line: m[1]}
		switch {
		case m[0] < 0 || m[0] >= saved.Size || m[1] < 1:
			return nil, fmt.Errorf("mark %d: offset %d, line %d, in a file of %d bytes", i, m[0], m[1], saved.Size)
		case i > 0 && (m[0] <= saved.Marks[i-1][0] || m[1] <= saved.Marks[i-1][1]):
			return nil, fmt.Errorf("mark %d: offset %d, line %d, not after the mark before", i, m[0], m[1])
		}
	}
	return marks, nil
}

// specMarks is the regular file spec reads, as it is now, and this
// process's marks of it; no marks for a generator, a spec that does not
// parse, a missing file or one that is not regular (a FIFO has no marks).
func specMarks(spec string) (path string, fi fs.FileInfo, x *recordIndex) {
	sp, err := ParseSpec(spec)
	if err != nil || sp.Path == "" {
		return "", nil, nil
	}
	if fi, err = os.Stat(sp.Path); err != nil || !fi.Mode().IsRegular() {
		return "", nil, nil
	}
	return sp.Path, fi, indexFor(sp.Path, fi)
}

// ForgetMarks drops every mark this process has noted or loaded, as a new
// process starts without any; readers then read from the start of their
// files until they note marks again.
func ForgetMarks() {
	indexes.Lock()
	defer indexes.Unlock()
	indexes.byFile, indexes.order = nil, nil
}
