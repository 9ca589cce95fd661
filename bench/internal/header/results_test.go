package header

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testInfo() Info {
	return Info{Program: "bench/x", CPU: "Test CPU", CPUs: 1, Load: "0 0 0", Go: "go", OpenBLAS: "0", Commit: "c"}
}

func TestResultsWritesTheFileWholeOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.txt")
	if err := os.WriteFile(path, []byte("old results\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	r, err := begin(&stdout, path, testInfo())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(r, "table row")
	if got, _ := os.ReadFile(path); string(got) != "old results\n" {
		t.Fatalf("results file before Close: %q, want the old one untouched", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	if len(lines) != 6 || lines[0] != "# bench/x: 0001-01-01T00:00:00Z" || lines[4] != "table row" ||
		!strings.HasPrefix(lines[5], "# load average after ") {
		t.Fatalf("results file:\n%s", got)
	}
	if stdout.String() != string(got) {
		t.Fatalf("stdout %q differs from the file %q", stdout.String(), got)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestResultsWithoutPathOnlyPrints(t *testing.T) {
	var stdout bytes.Buffer
	r, err := begin(&stdout, "", testInfo())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(r, "row")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "row\n# load average after ") {
		t.Fatalf("stdout: %q", stdout.String())
	}
}

func TestResultsCloseReportsAnUnwritableFile(t *testing.T) {
	r, err := begin(&bytes.Buffer{}, filepath.Join(t.TempDir(), "missing", "x.txt"), testInfo())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err == nil || !strings.Contains(err.Error(), "x.txt") {
		t.Fatalf("Close into a missing folder: %v", err)
	}
}
