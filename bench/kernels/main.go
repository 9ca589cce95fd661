// Command kernels benchmarks heterps' CPU kernels against their references
// measured in the same run: OpenBLAS sgemm for GEMM-bound work and a plain
// memcpy of the same bytes for memory-bound work. It prints one table per
// op family with our figure, the reference's and the ratio. It measures; it
// asserts nothing.
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/native"
)

var (
	minTime = flag.Duration("mintime", 300*time.Millisecond, "minimum measuring time per figure")
	threads = flag.Int("threads", 1, "kernel threads")
	outPath = flag.String("out", "", header.OutUsage)
	only    = flag.String("only", "", "run only these sections, comma-separated: fc, memory, embedding, sparse (default: all)")
)

// sections are the benchmark's tables in the order they print.
var sections = []struct {
	name string
	run  func()
}{{"fc", fcLayer}, {"memory", memoryBound}, {"embedding", embeddingBag}, {"sparse", sparseRows}}

// output is where the tables go: stdout, and the results file with --out.
var output io.Writer = os.Stdout

func main() {
	native.FixOpenBLASCore() // the vector GEMM kernels, as heterps and heterpsd run them
	flag.Parse()
	res, err := header.Begin(*outPath, header.Collect("bench/kernels"))
	must(err)
	output = res
	fmt.Fprintf(output, "heterps kernel benchmarks — %s/%s, %d CPUs, GOMAXPROCS %d, kernel threads %d\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), *threads)
	fmt.Fprintf(output, "ISAs supported: %v; each figure is the best of several timed runs of at least %v\n\n", native.SupportedISAs(), *minTime)
	for _, sec := range sections {
		if *only == "" || slices.Contains(strings.Split(*only, ","), sec.name) {
			sec.run()
		}
	}
	must(res.Close())
}

// backend returns a CPU backend for isa with the configured thread count.
func backend(isa native.ISA) *native.CPU {
	b, err := native.NewCPU(native.CPUOptions{ISA: &isa, Threads: *threads})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return b
}

// measure returns the best seconds per call of fn over repeated batches
// lasting at least minTime in all.
func measure(fn func()) float64 {
	fn() // warm up: page faults, caches, OpenBLAS thread start
	best := 1e300
	reps := 1
	var total time.Duration
	for runs := 0; total < *minTime || runs < 4; runs++ {
		start := time.Now()
		for range reps {
			fn()
		}
		d := time.Since(start)
		total += d
		best = min(best, d.Seconds()/float64(reps))
		if d < *minTime/10 {
			reps *= 2
		}
	}
	return best
}

func randBuf(rng *rand.Rand, n int, lo, hi float32) native.HostBuffer {
	b := make(native.HostBuffer, n)
	for i := range b {
		b[i] = lo + (hi-lo)*rng.Float32()
	}
	return b
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}

func table() *tabwriter.Writer {
	return tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
}
