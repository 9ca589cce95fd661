// Package header is the header every benchmark program prints above its
// results, and the results file the program writes itself: when and on
// what it ran (date, CPU model, cores, load average and host speed before
// and after) and with what (Go, OpenBLAS, the heterps commit, the Python
// packages of the competitor it drove), so that no results file needs a
// hand-typed header.
package header

/*
#cgo LDFLAGS: -lopenblas
#include <stdlib.h>
#include <time.h>

char *openblas_get_config(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// host_gflops runs n x n x n sgemm on one OpenBLAS thread for about
// seconds and returns GFLOP/s; 0 when the operands cannot be allocated.
static double host_gflops(int n, double seconds) {
  size_t len = (size_t)n * n;
  float *a = malloc(len * sizeof(float)), *b = malloc(len * sizeof(float)), *c = malloc(len * sizeof(float));
  double rate = 0;
  if (a != NULL && b != NULL && c != NULL) {
    for (size_t i = 0; i < len; i++) {
      a[i] = (float)(i % 7) * 0.125f;
      b[i] = (float)(i % 5) * 0.25f;
    }
    int threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    cblas_sgemm(101, 111, 111, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); // warm-up
    long reps = 0;
    double start = seconds_now(), took = 0;
    do {
      cblas_sgemm(101, 111, 111, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
      reps++;
      took = seconds_now() - start;
    } while (took < seconds);
    openblas_set_num_threads(threads);
    rate = 2.0 * n * n * (double)n * reps / took / 1e9;
  }
  free(a);
  free(b);
  free(c);
  return rate;
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Package is one Python distribution a benchmark drove and its version.
type Package struct {
	Label   string // what the header calls it, e.g. "PyTorch"
	Dist    string // the distribution's name on the package index, e.g. "torch"
	Version string // "" until looked up; "not installed" when absent
}

// Info is what the header says.
type Info struct {
	Program  string
	Time     time.Time
	CPU      string  // model name
	CPUs     int     // logical CPUs
	Cores    int     // physical cores, 0 when /proc/cpuinfo does not say
	Load     string  // the three load averages
	Speed    float64 // HostSpeed before the benchmark, GFLOP/s
	Go       string
	OpenBLAS string
	Commit   string
	Python   []Package
}

// Collect gathers the header of program now, before it measures anything.
// Each python entry names an interpreter and the packages to look up in it.
func Collect(program string, python ...Python) Info {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	model, cores := parseCPUInfo(string(cpuinfo))
	info := Info{Program: program, Time: time.Now().UTC(), CPU: model, CPUs: runtime.NumCPU(), Cores: cores,
		Load: LoadAverage(), Speed: HostSpeed(), Go: runtime.Version(), OpenBLAS: openBLAS(), Commit: commit()}
	for _, p := range python {
		info.Python = append(info.Python, p.Versions()...)
	}
	return info
}

// Write prints the header: lines that start with "# ".
func (i Info) Write(w io.Writer) error {
	cores := ""
	if i.Cores > 0 {
		cores = fmt.Sprintf(", %d cores", i.Cores)
	}
	versions := []string{i.Go, "OpenBLAS " + i.OpenBLAS, "heterps " + i.Commit}
	for _, p := range i.Python {
		versions = append(versions, p.Label+" "+p.Version)
	}
	_, err := fmt.Fprintf(w, "# %s: %s\n# machine: %s, %d CPUs%s; load average before %s\n# host speed before: %s (%s)\n# versions: %s\n",
		i.Program, i.Time.Format(time.RFC3339), i.CPU, i.CPUs, cores, i.Load, gflops(i.Speed), speedProbe, strings.Join(versions, ", "))
	return err
}

// WriteLoadAfter prints the footer line: the load average and the host
// speed now, after the benchmark ran.
func WriteLoadAfter(w io.Writer) error {
	_, err := fmt.Fprintf(w, "# load average after %s; host speed after %s\n", LoadAverage(), gflops(HostSpeed()))
	return err
}

// speedProbe says what HostSpeed times.
const speedProbe = "OpenBLAS sgemm 256x256x256 on one thread for 0.2 s; other tenants of a shared host lower it"

// HostSpeed is the GFLOP/s of single-thread OpenBLAS sgemm on 256 x 256
// matrices over 0.2 s: the load average counts this machine's runnable
// threads, not a virtual machine's neighbours on the same physical cores,
// which on the VMs these benchmarks run on have halved training's speed
// with the load average at 2. Timed before and after a benchmark, it is a
// partial witness of the host's state: it sees what the neighbours take of
// a core's arithmetic, not of its caches and memory. It times the
// OpenBLAS core the process runs (the versions line names it): a program
// calls native.FixOpenBLASCore first, as heterps does, or a VM whose CPU
// OpenBLAS misreads times its slowest kernels (Prescott: 15 GFLOP/s against
// SkylakeX's 119 on the Intel VM).
func HostSpeed() float64 { return float64(C.host_gflops(256, 0.2)) }

// openBLASThreads is OpenBLAS's thread count (the probe's tests check it
// is left alone).
func openBLASThreads() int { return int(C.openblas_get_num_threads()) }

// gflops prints a HostSpeed figure, "unknown" for 0.
func gflops(rate float64) string {
	if rate <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GFLOP/s", rate)
}

// LoadAverage is the 1, 5 and 15 minute load averages, "unknown" where
// /proc/loadavg cannot be read.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return parseLoadAvg(string(b))
}

func parseLoadAvg(s string) string {
	f := strings.Fields(s)
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// parseCPUInfo returns the first model name in /proc/cpuinfo's text and
// the number of distinct (physical id, core id) pairs.
func parseCPUInfo(text string) (model string, cores int) {
	model = "unknown CPU"
	seen := map[string]bool{}
	physical := ""
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			if model == "unknown CPU" {
				model = v
			}
		case "physical id":
			physical = v
		case "core id":
			seen[physical+"/"+v] = true
		}
	}
	return model, len(seen)
}

// openBLAS is the linked library's own version and core, as
// openblas_get_config says, else the Debian package's version.
func openBLAS() string {
	if v, ok := parseOpenBLASConfig(C.GoString(C.openblas_get_config())); ok {
		return v
	}
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "libopenblas0").Output()
	if err != nil || len(out) == 0 {
		return "unknown"
	}
	return strings.TrimSpace(string(out)) + " (Debian package)"
}

// parseOpenBLASConfig turns "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY
// Haswell MAX_THREADS=64" into "0.3.21 (DYNAMIC_ARCH NO_AFFINITY Haswell
// MAX_THREADS=64)"; false when the text names no version.
func parseOpenBLASConfig(config string) (string, bool) {
	f := strings.Fields(config)
	if len(f) < 2 || f[0] != "OpenBLAS" || !strings.ContainsAny(f[1][:1], "0123456789") {
		return "", false
	}
	if len(f) == 2 {
		return f[1], true
	}
	return fmt.Sprintf("%s (%s)", f[1], strings.Join(f[2:], " ")), true
}

// commit is the tree's short commit, with "+changes" when tracked files
// other than the recorded results differ from it (a benchmark run rewrites
// bench/results/ before the next one starts); "unknown" outside a git
// checkout.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)bench/results").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "+changes"
	}
	return c
}

// Python names an interpreter and the packages a benchmark used from it.
type Python struct {
	Interpreter string
	Packages    []Package
}

// versionScript prints a JSON object of each named distribution's version
// ("" when it is not installed), read from its metadata without importing
// it (importing torch or paddle takes seconds).
const versionScript = `
import json, sys
from importlib import metadata
out = {}
for d in sys.argv[1:]:
    try:
        out[d] = metadata.version(d)
    except metadata.PackageNotFoundError:
        out[d] = ""
print(json.dumps(out))
`

// Versions looks the packages up in the interpreter. A package it cannot
// find, or an interpreter that does not run, reads "not installed" or the
// reason.
func (p Python) Versions() []Package {
	out := make([]Package, len(p.Packages))
	copy(out, p.Packages)
	args := []string{"-c", versionScript}
	for _, pkg := range p.Packages {
		args = append(args, pkg.Dist)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := exec.CommandContext(ctx, p.Interpreter, args...).Output()
	var found map[string]string
	if err == nil {
		err = json.Unmarshal(js, &found)
	}
	for i := range out {
		switch {
		case err != nil:
			out[i].Version = fmt.Sprintf("unknown (%s: %v)", p.Interpreter, err)
		case found[out[i].Dist] == "":
			out[i].Version = "not installed"
		default:
			out[i].Version = found[out[i].Dist]
		}
	}
	return out
}
