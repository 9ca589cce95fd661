package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithin runs load and fails the test if it does not return in time:
// a FIFO opened for reading would block forever.
func loadWithin(t *testing.T, load func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- load() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("loading did not return: it blocked on the file")
		return nil
	}
}

func TestLoadModelRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/zero", fifo, dir + "/"} {
		err := loadWithin(t, func() error { _, err := LoadModel(path); return err })
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadModel(%s) = %v, want ErrNotRegular naming the path", path, err)
		}
	}
}

func TestDecodeFileRefusesNonRegularFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "node.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	loaders := map[string]func(string) error{
		"node":    func(p string) error { _, err := LoadNode(p); return err },
		"job":     func(p string) error { _, err := LoadJob(p); return err },
		"catalog": func(p string) error { _, err := LoadCatalog(p); return err },
	}
	for name, load := range loaders {
		for _, path := range []string{"/dev/zero", fifo} {
			err := loadWithin(t, func() error { return load(path) })
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s file %s: got %v, want ErrNotRegular", name, path, err)
			}
		}
	}
}

func TestLoadModelRefusesLargeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(path, make([]byte, MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadModel(path)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1048577 bytes") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("got %v, want ErrTooLarge with the size and the cap", err)
	}
}

func TestReadBeforeRefusesAFileThatGrew(t *testing.T) {
	_, err := readBefore("grown", strings.NewReader(strings.Repeat("x", 100)), 99, time.Now().Add(time.Minute))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if got, err := readBefore("ok", strings.NewReader("abc"), 3, time.Now().Add(time.Minute)); err != nil || string(got) != "abc" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestReadBeforeStopsAtTheDeadline(t *testing.T) {
	_, err := readBefore("slow", strings.NewReader("abc"), 10, time.Now().Add(-time.Second))
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

func TestLoadModelReadsARegularFile(t *testing.T) {
	_, src, err := ReadExample(ExampleModels, "linreg")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "linreg.toml")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(path); err != nil {
		t.Fatal(err)
	}
}
