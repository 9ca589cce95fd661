package header

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// OutUsage is the help text of the --out flag every benchmark takes.
const OutUsage = "also write the output, header included, to this results file (written whole when the benchmark ends; a failed run leaves the file as it was)"

// Results is a benchmark's output. What is written to it goes to stdout as
// it comes and, when a path is set, into memory; Close adds the load
// average after and writes the file whole, so a run that fails half way
// never leaves a half-written results file.
type Results struct {
	stdout io.Writer
	path   string
	buf    bytes.Buffer
}

// Begin starts the output of a benchmark on stdout (and path, if not
// empty) with info's header.
func Begin(path string, info Info) (*Results, error) {
	return begin(os.Stdout, path, info)
}

func begin(stdout io.Writer, path string, info Info) (*Results, error) {
	r := &Results{stdout: stdout, path: path}
	if err := info.Write(r); err != nil {
		return nil, fmt.Errorf("write the header: %w", err)
	}
	return r, nil
}

// Write copies p to stdout and, with a path, keeps it for the file.
func (r *Results) Write(p []byte) (int, error) {
	if r.path != "" {
		r.buf.Write(p)
	}
	return r.stdout.Write(p)
}

// Close prints the load average after and writes the results file, through
// a temporary file beside it renamed over it.
func (r *Results) Close() error {
	if err := WriteLoadAfter(r); err != nil {
		return fmt.Errorf("write the load average after: %w", err)
	}
	if r.path == "" {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(r.path), filepath.Base(r.path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("results file %s: %w", r.path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if _, err := tmp.Write(r.buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("results file %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("results file %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("results file %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), r.path); err != nil {
		return fmt.Errorf("results file %s: %w", r.path, err)
	}
	return nil
}
