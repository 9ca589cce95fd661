package native

import (
	"math"
	"math/rand/v2"
	"testing"
)

// oddSizes are lengths that catch tail-handling bugs in vector loops: empty,
// one, primes, just around vector widths, and unaligned larger sizes.
var oddSizes = []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 257, 1000, 4099}

// forEachISA runs fn with a single-threaded and a multi-threaded backend for
// every ISA this CPU supports, as subtests named after the backend.
func forEachISA(t *testing.T, fn func(t *testing.T, b *CPU)) {
	t.Helper()
	for _, isa := range SupportedISAs() {
		for _, threads := range []int{1, 3} {
			b, err := NewCPU(CPUOptions{ISA: &isa, Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			t.Run(isa.String()+"/t"+string(rune('0'+threads)), func(t *testing.T) { fn(t, b) })
		}
	}
}

// scalarCPU is the reference backend every variant is compared with.
func scalarCPU(t *testing.T) *CPU {
	t.Helper()
	isa := Scalar
	b, err := NewCPU(CPUOptions{ISA: &isa, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// randFloats returns n values uniform in [lo, hi).
func randFloats(rng *rand.Rand, n int, lo, hi float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = lo + (hi-lo)*rng.Float32()
	}
	return out
}

// guardLen is the number of sentinel floats on each side of a guarded buffer.
const guardLen = 16

// guardSentinel is a NaN payload no kernel produces by accident.
var guardSentinel = math.Float32frombits(0x7fc0beef)

// guarded returns a buffer of n floats (copied from init when given) that
// sits between sentinel padding, and the full padded slice for checkGuards.
// This is gonum's guardVector idea: a kernel that writes past either end of
// its buffer changes a sentinel.
func guarded(n int, init []float32) (HostBuffer, []float32) {
	full := make([]float32, n+2*guardLen)
	for i := range full {
		full[i] = guardSentinel
	}
	buf := HostBuffer(full[guardLen : guardLen+n : guardLen+n])
	if init != nil {
		copy(buf, init)
	} else {
		clear(buf)
	}
	return buf, full
}

// checkGuards fails the test if anything wrote into the padding.
func checkGuards(t *testing.T, name string, full []float32) {
	t.Helper()
	n := len(full) - 2*guardLen
	for i := range guardLen {
		for _, j := range []int{i, guardLen + n + i} {
			if math.Float32bits(full[j]) != math.Float32bits(guardSentinel) {
				t.Fatalf("%s: padding at %d overwritten with %v", name, j-guardLen, full[j])
			}
		}
	}
}

// assertClose fails unless |got-want| <= atol + rtol*|want| elementwise
// (NaN only matches NaN).
func assertClose(t *testing.T, name string, got, want []float32, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", name, len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) || math.IsNaN(g) {
			if math.IsNaN(w) != math.IsNaN(g) {
				t.Fatalf("%s[%d] = %v, want %v", name, i, g, w)
			}
			continue
		}
		if math.Abs(g-w) > atol+rtol*math.Abs(w) {
			t.Fatalf("%s[%d] = %v, want %v (rtol %g, atol %g)", name, i, g, w, rtol, atol)
		}
	}
}
