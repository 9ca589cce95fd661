package header

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const cpuinfo = `processor	: 0
model name	: AMD EPYC 7B13
physical id	: 0
core id		: 0

processor	: 1
model name	: AMD EPYC 7B13
physical id	: 0
core id		: 0

processor	: 2
model name	: AMD EPYC 7B13
physical id	: 0
core id		: 1
`

func TestParseCPUInfoCountsPhysicalCores(t *testing.T) {
	model, cores := parseCPUInfo(cpuinfo)
	if model != "AMD EPYC 7B13" || cores != 2 {
		t.Fatalf("parseCPUInfo = %q, %d cores; want AMD EPYC 7B13, 2 (two threads of core 0)", model, cores)
	}
	if model, cores := parseCPUInfo("processor : 0\n"); model != "unknown CPU" || cores != 0 {
		t.Fatalf("parseCPUInfo without fields = %q, %d", model, cores)
	}
}

func TestParseLoadAvg(t *testing.T) {
	if got := parseLoadAvg("0.40 0.42 1.81 2/345 6789\n"); got != "0.40 0.42 1.81" {
		t.Fatalf("parseLoadAvg = %q", got)
	}
	if got := parseLoadAvg("0.40"); got != "unknown" {
		t.Fatalf("parseLoadAvg of a short line = %q", got)
	}
}

func TestParseOpenBLASConfig(t *testing.T) {
	got, ok := parseOpenBLASConfig("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64")
	if !ok || got != "0.3.21 (DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64)" {
		t.Fatalf("parseOpenBLASConfig = %q, %v", got, ok)
	}
	if _, ok := parseOpenBLASConfig("DYNAMIC_ARCH Haswell"); ok {
		t.Fatal("a config without a version parsed")
	}
}

func TestOpenBLASComesFromTheLinkedLibrary(t *testing.T) {
	if v := openBLAS(); !strings.ContainsAny(v[:1], "0123456789") || strings.Contains(v, "Debian") {
		t.Fatalf("openBLAS() = %q, want the library's own version", v)
	}
}

func TestWriteSaysEveryField(t *testing.T) {
	info := Info{Program: "bench/x", Time: time.Date(2026, 12, 1, 2, 3, 4, 0, time.UTC), CPU: "Test CPU", CPUs: 4, Cores: 2,
		Load: "1.00 2.00 3.00", Speed: 91.25, Go: "go1.26.8", OpenBLAS: "0.3.21", Commit: "abc1234",
		Python: []Package{{Label: "PyTorch", Dist: "torch", Version: "2.15.0"}, {Label: "Paddle", Dist: "paddlepaddle", Version: "3.3.1"}}}
	var b bytes.Buffer
	if err := info.Write(&b); err != nil {
		t.Fatal(err)
	}
	want := "# bench/x: 2026-12-01T02:03:04Z\n# machine: Test CPU, 4 CPUs, 2 cores; load average before 1.00 2.00 3.00\n" +
		"# host speed before: 91.2 GFLOP/s (" + speedProbe + ")\n" +
		"# versions: go1.26.8, OpenBLAS 0.3.21, heterps abc1234, PyTorch 2.15.0, Paddle 3.3.1\n"
	if b.String() != want {
		t.Fatalf("header:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestCollectFillsTheMachineAndTheCommit(t *testing.T) {
	info := Collect("bench/x")
	if info.CPUs < 1 || info.Load == "" || info.Speed <= 0 || info.Go == "" || info.OpenBLAS == "unknown" || info.Time.IsZero() {
		t.Fatalf("Collect = %+v", info)
	}
	if _, err := exec.LookPath("git"); err == nil && info.Commit == "unknown" {
		t.Fatalf("Collect in a git checkout: commit unknown")
	}
}

// TestPythonVersionsReadsMetadata plants a distribution's metadata on
// PYTHONPATH and looks it up, beside one that is not installed.
func TestPythonVersionsReadsMetadata(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	info := filepath.Join(dir, "fakepkg-1.2.3.dist-info")
	if err := os.Mkdir(info, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info, "METADATA"), []byte("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.2.3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", dir)
	got := Python{Interpreter: py, Packages: []Package{{Label: "Fake", Dist: "fakepkg"}, {Label: "Absent", Dist: "no-such-dist-xyz"}}}.Versions()
	if got[0].Version != "1.2.3" || got[1].Version != "not installed" {
		t.Fatalf("Versions = %+v", got)
	}
	bad := Python{Interpreter: filepath.Join(dir, "no-python"), Packages: []Package{{Label: "Fake", Dist: "fakepkg"}}}.Versions()
	if !strings.HasPrefix(bad[0].Version, "unknown (") {
		t.Fatalf("Versions with no interpreter = %+v", bad)
	}
}

// TestCommitIgnoresRecordedResults: a run that rewrote bench/results/ does
// not mark the next benchmark's tree as changed; any other tracked file does.
func TestCommitIgnoresRecordedResults(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	t.Chdir(dir)
	mustWrite := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	mustWrite("main.go", "package main\n")
	mustWrite("bench/results/x.txt", "old\n")
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "init")
	mustWrite("bench/results/x.txt", "new\n")
	if c := commit(); strings.HasSuffix(c, "+changes") {
		t.Errorf("results rewritten only: commit() = %q, want no +changes", c)
	}
	mustWrite("main.go", "package main // edited\n")
	if c := commit(); !strings.HasSuffix(c, "+changes") {
		t.Errorf("a tracked source edited: commit() = %q, want +changes", c)
	}
}

// The footer says the load average and the host speed after the run, and
// the speed probe leaves OpenBLAS's thread count as it found it.
func TestWriteLoadAfterTimesTheHost(t *testing.T) {
	before := openBLASThreads()
	var b bytes.Buffer
	if err := WriteLoadAfter(&b); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^# load average after \S+ \S+ \S+; host speed after [0-9.]+ GFLOP/s\n$`).MatchString(b.String()) {
		t.Fatalf("footer %q", b.String())
	}
	if got := openBLASThreads(); got != before {
		t.Fatalf("OpenBLAS threads %d after the probe, %d before", got, before)
	}
}
