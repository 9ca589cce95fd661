package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// MaxFileBytes caps every file the config package reads (model, job, node,
// catalog and problem files): the largest shipped one is a few KiB, and the
// coordinator's HTTP bodies have the same cap.
const MaxFileBytes = 1 << 20

// fileReadTimeout bounds reading a config file.
const fileReadTimeout = 10 * time.Second

// ErrNotRegular refuses a config path that is a directory, FIFO, device or
// socket: reading /dev/zero grows without bound and opening a FIFO blocks.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge refuses a config file larger than MaxFileBytes.
var ErrTooLarge = errors.New("file too large")

// ReadFile reads a config file: a regular file (symbolic links followed)
// of at most MaxFileBytes, read within fileReadTimeout.
func ReadFile(path string) ([]byte, error) {
	return readFileLimited(path, MaxFileBytes, fileReadTimeout)
}

// ReadFileLimited reads path as ReadFile does, capped at limit bytes
// instead: for other small files read where a FIFO or a device in their
// place must not hold or flood the reader.
func ReadFileLimited(path string, limit int64) ([]byte, error) {
	return readFileLimited(path, limit, fileReadTimeout)
}

// readFileLimited checks the path with Stat before opening it (opening a
// FIFO for reading blocks until a writer comes), opens it non-blocking and
// checks the open file again (the path may have changed in between), then
// reads at most limit+1 bytes in chunks, giving up once the deadline has
// passed between two chunks. A regular file cannot be polled, so a single
// read stuck in the kernel (a dead NFS server) is not interrupted.
func readFileLimited(path string, limit int64, timeout time.Duration) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := checkRegular(path, fi, limit); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := checkRegular(path, opened, limit); err != nil {
		return nil, err
	}
	return readBefore(path, f, limit, time.Now().Add(timeout))
}

func checkRegular(path string, fi fs.FileInfo, limit int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("config: %s: %w (mode %s)", path, ErrNotRegular, fi.Mode().Type())
	}
	if fi.Size() > limit {
		return fmt.Errorf("config: %s: %w: %d bytes, the cap is %d", path, ErrTooLarge, fi.Size(), limit)
	}
	return nil
}

// readBefore reads r to its end, refusing more than limit bytes (a file
// that grew after the checks) and going on past deadline.
func readBefore(path string, r io.Reader, limit int64, deadline time.Time) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("config: %s: read deadline %s passed", path, deadline.Format(time.RFC3339))
		}
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if int64(len(out)) > limit {
			return nil, fmt.Errorf("config: %s: %w: more than the cap of %d bytes", path, ErrTooLarge, limit)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
	}
}
