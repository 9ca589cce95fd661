package ckpt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ManifestName is the file that marks a checkpoint directory complete.
const ManifestName = "manifest.json"

// ManifestVersion is the manifest format this package writes and reads.
const ManifestVersion = 1

// maxManifestSize caps the manifest a reader accepts.
const maxManifestSize = 16 << 20

// Manifest lists the files of a multi-file checkpoint (one per parameter
// server shard, say) with the sizes and digests they were written with.
type Manifest struct {
	FormatVersion int         `json:"format_version"`
	JobID         string      `json:"job_id"`
	Step          int64       `json:"step"`
	Shards        int         `json:"shards"`
	Files         []FileEntry `json:"files"`
}

// ErrNoManifest is wrapped by the errors for a directory that has no
// manifest: a checkpoint whose writing never finished.
var ErrNoManifest = errors.New("no " + ManifestName + ": checkpoint incomplete")

// validate checks what a writer must not write and a reader must not trust.
func (m *Manifest) validate() error {
	switch {
	case m.FormatVersion != ManifestVersion:
		return fmt.Errorf("format_version is %d; this build reads %d", m.FormatVersion, ManifestVersion)
	case m.Step < 0:
		return fmt.Errorf("step is negative (%d)", m.Step)
	case m.Shards < 1:
		return fmt.Errorf("shards is %d, not at least 1", m.Shards)
	case len(m.Files) == 0:
		return errors.New("lists no files")
	}
	seen := make(map[string]bool, len(m.Files))
	for _, e := range m.Files {
		if err := e.validate(); err != nil {
			return fmt.Errorf("file %q: %w", e.Name, err)
		}
		if seen[e.Name] {
			return fmt.Errorf("file %q listed twice", e.Name)
		}
		seen[e.Name] = true
	}
	return nil
}

func (e FileEntry) validate() error {
	// Names are plain file names in the checkpoint directory: a hostile
	// manifest must not point the verifier elsewhere.
	if e.Name == "" || e.Name == "." || e.Name == ".." || e.Name == ManifestName ||
		strings.ContainsAny(e.Name, `/\`) || e.Name != filepath.Base(e.Name) {
		return errors.New("not a file name within the checkpoint directory")
	}
	if e.Size < 0 {
		return fmt.Errorf("size is negative (%d)", e.Size)
	}
	if b, err := hex.DecodeString(e.SHA256); err != nil || len(b) != sha256.Size || strings.ToLower(e.SHA256) != e.SHA256 {
		return fmt.Errorf("sha256 %q is not 64 lower-case hex digits", e.SHA256)
	}
	return nil
}

// WriteManifest marks the checkpoint in dir complete. It checks that every
// listed file is there with its recorded size, makes each durable (fsync)
// and only then writes the manifest, atomically. Call it last, after every
// file of the checkpoint is written. FormatVersion is set for the caller.
func WriteManifest(dir string, m Manifest) error {
	m.FormatVersion = ManifestVersion
	if err := m.validate(); err != nil {
		return fmt.Errorf("ckpt: manifest for %s: %w", dir, err)
	}
	for _, e := range m.Files {
		if err := syncListed(filepath.Join(dir, e.Name), e.Size); err != nil {
			return fmt.Errorf("ckpt: manifest for %s: %w", dir, err)
		}
	}
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("ckpt: manifest for %s: %w", dir, err)
	}
	return writeAtomic(filepath.Join(dir, ManifestName), func(w io.Writer) error {
		_, err := w.Write(append(body, '\n'))
		return err
	})
}

// syncListed checks a file has the size the manifest will record and fsyncs it.
func syncListed(path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != size {
		return fmt.Errorf("%s is %d bytes, the entry says %d", path, st.Size(), size)
	}
	return f.Sync()
}

// ReadManifest reads and checks dir's manifest without looking at the files
// it lists. A directory without one gives an error wrapping ErrNoManifest.
func ReadManifest(dir string) (Manifest, error) {
	path := filepath.Join(dir, ManifestName)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("ckpt: %s: %w", dir, ErrNoManifest)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("ckpt: %w", err)
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("ckpt: %w", err)
	}
	if len(body) > maxManifestSize {
		return Manifest{}, fmt.Errorf("ckpt: %s: larger than %d bytes", path, maxManifestSize)
	}
	m, err := decodeManifest(body)
	if err != nil {
		return Manifest{}, fmt.Errorf("ckpt: %s: %w", path, err)
	}
	return m, nil
}

func decodeManifest(body []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("not a valid manifest: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return m, fmt.Errorf("not a valid manifest: data after the JSON object")
	}
	return m, m.validate()
}

// FileProblem is one listed file that failed verification.
type FileProblem struct {
	Name    string
	Missing bool   // the file does not exist
	Reason  string // what is wrong
}

// VerifyError lists every file of a checkpoint directory that is missing or
// does not match its manifest entry.
type VerifyError struct {
	Dir      string
	Problems []FileProblem
}

func (e *VerifyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %s: %d listed file(s) missing or corrupt:", e.Dir, len(e.Problems))
	for _, p := range e.Problems {
		fmt.Fprintf(&b, " %s: %s;", p.Name, p.Reason)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// VerifyDir reads dir's manifest and checks that every listed file exists
// with the recorded size and SHA-256. Files that fail give a *VerifyError
// naming each of them.
func VerifyDir(dir string) (Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return m, err
	}
	var problems []FileProblem
	for _, e := range m.Files {
		if p, bad := verifyFile(dir, e); bad {
			problems = append(problems, p)
		}
	}
	if problems != nil {
		return m, &VerifyError{Dir: dir, Problems: problems}
	}
	return m, nil
}

func verifyFile(dir string, e FileEntry) (FileProblem, bool) {
	f, err := os.Open(filepath.Join(dir, e.Name))
	if errors.Is(err, fs.ErrNotExist) {
		return FileProblem{Name: e.Name, Missing: true, Reason: "missing"}, true
	}
	if err != nil {
		return FileProblem{Name: e.Name, Reason: err.Error()}, true
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return FileProblem{Name: e.Name, Reason: err.Error()}, true
	}
	if st.Size() != e.Size {
		return FileProblem{Name: e.Name, Reason: fmt.Sprintf("%d bytes, manifest says %d", st.Size(), e.Size)}, true
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return FileProblem{Name: e.Name, Reason: err.Error()}, true
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != e.SHA256 {
		return FileProblem{Name: e.Name, Reason: fmt.Sprintf("sha256 %s, manifest says %s", got, e.SHA256)}, true
	}
	return FileProblem{}, false
}

// DigestFile returns the manifest entry of an existing file, for files not
// written by WriteFile.
func DigestFile(path string) (FileEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileEntry{}, fmt.Errorf("ckpt: %w", err)
	}
	defer f.Close()
	sum := sha256.New()
	n, err := io.Copy(sum, f)
	if err != nil {
		return FileEntry{}, fmt.Errorf("ckpt: digest %s: %w", path, err)
	}
	return FileEntry{Name: filepath.Base(path), Size: n, SHA256: hex.EncodeToString(sum.Sum(nil))}, nil
}
