package ckpt

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// testHookWrap, when set by a test, wraps the temporary file's writer (to
// inject a failure midway through a write).
var testHookWrap func(io.Writer) io.Writer

// filePerm is the mode of written files: readable by other tools of the user's group.
const filePerm = 0o644

// WriteAtomic creates path with the bytes fill writes, as checkpoint files
// are written (writeAtomic): a reader sees the old file or the whole new
// one, never a part.
func WriteAtomic(path string, fill func(io.Writer) error) error { return writeAtomic(path, fill) }

// writeAtomic creates path with the bytes fill writes: into a temporary file
// in the same directory, synced, renamed over path, and the directory synced.
// On error the temporary file is removed and path is untouched.
func writeAtomic(path string, fill func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	removeStaleTemps(dir, base)
	f, err := os.CreateTemp(dir, tempPrefix(base)+"*")
	if err != nil {
		return fmt.Errorf("ckpt: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("ckpt: write %s: %w", path, err)
		}
	}()
	if err = f.Chmod(filePerm); err != nil {
		return err
	}
	var w io.Writer = f
	if testHookWrap != nil {
		w = testHookWrap(w)
	}
	if err = fill(w); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// tempPrefix starts the names of writeAtomic's temporary files for base.
func tempPrefix(base string) string { return "." + base + ".tmp-" }

// staleTempAge is how long a temporary file must have gone unwritten
// before a write of its target removes it: a live writer's grows (two
// writers of one manifest, a node's and the coordinator's, can meet), a
// dead or frozen one's does not.
const staleTempAge = 10 * time.Minute

// removeStaleTemps removes the temporary files of earlier writes of base
// in dir that nothing has written to for staleTempAge: a process killed
// in the middle of writing a checkpoint left them, and they would
// otherwise stay for good, each as large as the file. A writer that was
// frozen and wakes to find its temporary file gone fails its rename
// instead of replacing newer data. What cannot be listed or removed is
// left: the write goes on.
func removeStaleTemps(dir, base string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := tempPrefix(base)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTempAge {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// syncDir makes a rename or a new file in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
