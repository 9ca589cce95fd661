package native

import (
	"errors"
	"slices"
	"testing"
)

// wsumSizes are the element counts tested: odd sizes and one large enough to
// be split into several pieces.
var wsumSizes = append(slices.Clone(oddSizes), 64<<10+5)

var wsumKs = []int{0, 1, 2, 3, 5, 8}

// wsumInputs returns k random buffers of n floats and weights that sum to 1.
func wsumInputs(seed uint64, n, k int) ([][]float32, []float32) {
	rng := newRNG(seed)
	g := make([][]float32, k)
	for q := range g {
		g[q] = randFloats(rng, n, -2, 2)
	}
	w := randFloats(rng, k, 0.1, 1)
	var sum float32
	for _, v := range w {
		sum += v
	}
	for q := range w {
		w[q] /= sum
	}
	return g, w
}

// runWeightedSum runs the op on guarded buffers, checks every guard and that
// the inputs are unchanged, and returns the output.
func runWeightedSum(t *testing.T, b *CPU, g [][]float32, w []float32, n int) []float32 {
	t.Helper()
	in := make([]Buffer, len(g))
	fulls := make([][]float32, len(g))
	for q := range g {
		var h HostBuffer
		h, fulls[q] = guarded(n, g[q])
		in[q] = h
	}
	out, ofull := guarded(n, randFloats(newRNG(99), n, 5, 6))
	if err := b.WeightedSum(out, w, in); err != nil {
		t.Fatalf("n=%d k=%d: %v", n, len(g), err)
	}
	checkGuards(t, "out", ofull)
	for q := range g {
		checkGuards(t, "g", fulls[q])
		if !slices.Equal(in[q].(HostBuffer), g[q]) {
			t.Fatalf("g[%d] changed", q)
		}
	}
	return slices.Clone(out)
}

func TestWeightedSumScalarMatchesFloat64(t *testing.T) {
	ref := scalarCPU(t)
	for _, n := range wsumSizes {
		for _, k := range wsumKs {
			g, w := wsumInputs(uint64(n*10+k), n, k)
			got := runWeightedSum(t, ref, g, w, n)
			want := make([]float32, n)
			for i := range want {
				var s float64
				for q := range k {
					s += float64(w[q]) * float64(g[q][i])
				}
				want[i] = float32(s)
			}
			assertClose(t, "out", got, want, 1e-5, 1e-6)
		}
	}
}

// Vector variants agree with the scalar reference up to FMA rounding, and a
// given ISA gives the same bits on any number of threads.
func TestWeightedSumMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	type wsumCase struct {
		g      [][]float32
		w      []float32
		scalar []float32
	}
	var cases []wsumCase
	for _, n := range wsumSizes {
		for _, k := range wsumKs {
			g, w := wsumInputs(uint64(n*10+k), n, k)
			cases = append(cases, wsumCase{g, w, runWeightedSum(t, ref, g, w, n)})
		}
	}
	forEachISA(t, func(t *testing.T, b *CPU) {
		single := sameISASingleThread(t, b)
		for _, c := range cases {
			n := len(c.scalar)
			got := runWeightedSum(t, b, c.g, c.w, n)
			assertClose(t, "out", got, c.scalar, 1e-5, 1e-6)
			if single != nil {
				assertClose(t, "out vs 1 thread", got, runWeightedSum(t, single, c.g, c.w, n), 0, 0)
			}
		}
	})
}

func TestWeightedSumNoInputsZeroes(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		out := runWeightedSum(t, b, nil, nil, 77)
		assertClose(t, "out", out, make([]float32, 77), 0, 0)
	})
}

// out may be one of the inputs: the parameter server accumulates in place.
func TestWeightedSumInPlace(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, n := range []int{1, 17, 1000, 64<<10 + 5} {
			g, w := wsumInputs(uint64(n), n, 3)
			want := runWeightedSum(t, b, g, w, n)
			acc := HostBuffer(slices.Clone(g[1]))
			if err := b.WeightedSum(acc, w, []Buffer{HostBuffer(g[0]), acc, HostBuffer(g[2])}); err != nil {
				t.Fatal(err)
			}
			assertClose(t, "in place", acc, want, 0, 0)
		}
	})
}

func TestWeightedSumBadInput(t *testing.T) {
	b := MustCPU()
	const n = 40
	backing := make([]float32, 2*n)
	g := []Buffer{HostBuffer(randFloats(newRNG(1), n, -1, 1)), HostBuffer(randFloats(newRNG(2), n, -1, 1))}
	cases := []struct {
		name string
		out  func() HostBuffer
		w    []float32
		g    []Buffer
		want error
	}{
		{"weights short", nil, []float32{1}, g, ErrShape},
		{"weights long", nil, []float32{1, 2, 3}, g, ErrShape},
		{"input short", nil, []float32{1, 2}, []Buffer{g[0], g[1].Slice(0, n-1)}, ErrShape},
		{"nil input", nil, []float32{1, 2}, []Buffer{g[0], nil}, ErrArg},
		{"partial overlap", func() HostBuffer { return HostBuffer(backing[5 : 5+n]) },
			[]float32{1, 2}, []Buffer{g[0], HostBuffer(backing[:n])}, ErrArg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out HostBuffer
			var full []float32
			if c.out != nil {
				out = c.out()
				copy(out, randFloats(newRNG(3), n, 7, 8))
			} else {
				out, full = guarded(n, randFloats(newRNG(3), n, 7, 8))
			}
			before := slices.Clone(out)
			if err := b.WeightedSum(out, c.w, c.g); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if full != nil {
				checkGuards(t, "out", full)
			}
			if !slices.Equal(out, before) {
				t.Fatal("out written despite the error")
			}
		})
	}
	if err := b.WeightedSum(nil, nil, nil); !errors.Is(err, ErrArg) {
		t.Fatalf("nil out: err = %v, want ErrArg", err)
	}
}

func TestPartialOverlap(t *testing.T) {
	buf := make([]float32, 10)
	cases := []struct {
		a, b []float32
		want bool
	}{
		{buf[0:5], buf[0:5], false}, // same start: allowed alias
		{buf[0:5], buf[5:10], false},
		{buf[0:5], buf[4:9], true},
		{buf[3:8], buf[0:4], true},
		{buf[0:10], buf[2:3], true},
		{buf[0:0], buf[0:5], false},
		{buf[0:5], make([]float32, 5), false},
	}
	for i, c := range cases {
		if got := partialOverlap(c.a, c.b); got != c.want {
			t.Errorf("case %d: partialOverlap = %v, want %v", i, got, c.want)
		}
	}
}
