package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteWholeReplacesInsteadOfRewriting: an output file is replaced by
// a complete new one, never rewritten in place, so that what had the old
// file (a hard link here; a disk that fills up, a kill in the middle
// otherwise) keeps it whole.
func TestWriteWholeReplacesInsteadOfRewriting(t *testing.T) {
	dir := t.TempDir()
	path, old := filepath.Join(dir, "profile.toml"), filepath.Join(dir, "old.toml")
	writeFile(t, path, "# measured: cpu-1t\n", 0o644)
	if err := os.Link(path, old); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	if err := writeWhole(path, []byte("# measured: cpu-1t, cpu-2t\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "# measured: cpu-1t, cpu-2t\n" {
		t.Errorf("%s holds %q", path, got)
	}
	if got, _ := os.ReadFile(old); string(got) != "# measured: cpu-1t\n" {
		t.Errorf("the old file was rewritten in place: it holds %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
