package native

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// optimCases are the optimisers tested, weight decay on in some.
var optimCases = []Optim{
	{Kind: SGD, LR: 0.1},
	{Kind: SGD, LR: 0.05, Momentum: 0.9, WeightDecay: 0.01},
	{Kind: Adagrad, LR: 0.1, Eps: 1e-8},
	{Kind: Adagrad, LR: 0.05, Eps: 1e-6, WeightDecay: 0.1},
	{Kind: Adam, LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
	{Kind: Adam, LR: 0.002, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.05},
}

const optimSteps = 3

// stepped returns o at the given 1-based step.
func stepped(o Optim, step int) Optim {
	o.Step = int64(step)
	return o
}

// refUpdate is the float64 reference of one optimiser step on w with
// gradient g and state st (shaped like w).
func refUpdate(o Optim, w, g []float64, st [][]float64) {
	for i := range w {
		gi := g[i] + float64(o.WeightDecay)*w[i]
		switch o.Kind {
		case SGD:
			if len(st) > 0 {
				st[0][i] = float64(o.Momentum)*st[0][i] + gi
				gi = st[0][i]
			}
			w[i] -= float64(o.LR) * gi
		case Adagrad:
			st[0][i] += gi * gi
			w[i] -= float64(o.LR) * gi / (math.Sqrt(st[0][i]) + float64(o.Eps))
		case Adam:
			b1, b2 := float64(o.Beta1), float64(o.Beta2)
			st[0][i] = b1*st[0][i] + (1-b1)*gi
			st[1][i] = b2*st[1][i] + (1-b2)*gi*gi
			mhat := st[0][i] / (1 - math.Pow(b1, float64(o.Step)))
			vhat := st[1][i] / (1 - math.Pow(b2, float64(o.Step)))
			w[i] -= float64(o.LR) * mhat / (math.Sqrt(vhat) + float64(o.Eps))
		}
	}
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// optimState is parameters and optimiser state on guarded buffers.
type optimState struct {
	w     HostBuffer
	state []Buffer
	fulls [][]float32
}

func newOptimState(o Optim, w []float32) *optimState {
	s := &optimState{}
	var full []float32
	s.w, full = guarded(len(w), w)
	s.fulls = append(s.fulls, full)
	for range o.StateBuffers() {
		h, full := guarded(len(w), nil)
		s.state = append(s.state, h)
		s.fulls = append(s.fulls, full)
	}
	return s
}

func (s *optimState) checkGuards(t *testing.T) {
	t.Helper()
	for _, f := range s.fulls {
		checkGuards(t, "w/state", f)
	}
}

// snapshot is w followed by every state buffer.
func (s *optimState) snapshot() []float32 {
	out := slices.Clone([]float32(s.w))
	for _, st := range s.state {
		out = append(out, st.(HostBuffer)...)
	}
	return out
}

// runDense runs optimSteps dense steps (a fresh gradient each step) and
// returns w and the state.
func runDense(t *testing.T, b *CPU, o Optim, w0 []float32, grads [][]float32) []float32 {
	t.Helper()
	s := newOptimState(o, w0)
	for step, g := range grads {
		gb, gfull := guarded(len(g), g)
		if err := b.Update(stepped(o, step+1), s.w, gb, s.state...); err != nil {
			t.Fatalf("%+v n=%d: %v", o, len(w0), err)
		}
		checkGuards(t, "g", gfull)
		if !slices.Equal(gb, g) {
			t.Fatal("g changed")
		}
		s.checkGuards(t)
	}
	return s.snapshot()
}

func randGrads(rng *rand.Rand, steps, n int) [][]float32 {
	g := make([][]float32, steps)
	for i := range g {
		g[i] = randFloats(rng, n, -1, 1)
	}
	return g
}

var optimSizes = append(slices.Clone(oddSizes), 64<<10+3)

func TestUpdateScalarMatchesFloat64(t *testing.T) {
	ref := scalarCPU(t)
	rng := newRNG(20)
	for _, o := range optimCases {
		for _, n := range optimSizes {
			w0 := randFloats(rng, n, -1, 1)
			grads := randGrads(rng, optimSteps, n)
			got := runDense(t, ref, o, w0, grads)

			w := to64(w0)
			st := make([][]float64, o.StateBuffers())
			for i := range st {
				st[i] = make([]float64, n)
			}
			for step, g := range grads {
				refUpdate(stepped(o, step+1), w, to64(g), st)
			}
			want := to32(w)
			for _, s := range st {
				want = append(want, to32(s)...)
			}
			assertClose(t, "w+state", got, want, 1e-4, 1e-6)
		}
	}
}

// denseCase is one dense update test with its scalar result.
type denseCase struct {
	o      Optim
	w0     []float32
	grads  [][]float32
	scalar []float32
}

// Vector variants agree with the scalar reference up to FMA rounding, and a
// given ISA gives the same bits on any number of threads.
func TestUpdateMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	rng := newRNG(21)
	var cases []denseCase
	for _, o := range optimCases {
		for _, n := range optimSizes {
			c := denseCase{o: o, w0: randFloats(rng, n, -1, 1), grads: randGrads(rng, optimSteps, n)}
			c.scalar = runDense(t, ref, o, c.w0, c.grads)
			cases = append(cases, c)
		}
	}
	forEachISA(t, func(t *testing.T, b *CPU) {
		single := sameISASingleThread(t, b)
		for _, c := range cases {
			got := runDense(t, b, c.o, c.w0, c.grads)
			assertClose(t, "vs scalar", got, c.scalar, 1e-4, 1e-6)
			if single != nil {
				assertClose(t, "vs 1 thread", got, runDense(t, single, c.o, c.w0, c.grads), 0, 0)
			}
		}
	})
}

// sameISASingleThread returns a one-thread backend with b's ISA, or nil when
// b is one already.
func sameISASingleThread(t *testing.T, b *CPU) *CPU {
	t.Helper()
	if b.Threads() == 1 {
		return nil
	}
	isa := b.ISA()
	single, err := NewCPU(CPUOptions{ISA: &isa, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return single
}

// Adam's first step moves every weight by about lr against the sign of its
// gradient: the bias correction undoes the zero-initialised moments.
func TestAdamFirstStepIsBiasCorrected(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		o := Optim{Kind: Adam, LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
		w0 := randFloats(newRNG(22), 33, -1, 1)
		g := randFloats(newRNG(23), 33, 0.5, 1)
		w := HostBuffer(slices.Clone(w0))
		if err := b.Update(o, w, HostBuffer(g), make(HostBuffer, 33), make(HostBuffer, 33)); err != nil {
			t.Fatal(err)
		}
		for i := range w {
			if d := float64(w0[i] - w[i]); math.Abs(d-0.01) > 1e-5 {
				t.Fatalf("w[%d] moved by %v, want 0.01", i, d)
			}
		}
	})
}

// rowsCase is a sparse update test: distinct random rows of a table.
type rowsCase struct{ tableRows, dim, nrows int }

// rowsCases covers odd dims and odd row counts up to maxRows; with several,
// also a table whose update is split into several pieces.
func rowsCases(rng *rand.Rand, several bool, maxRows int) []rowsCase {
	var out []rowsCase
	for _, dim := range oddSizes {
		tr := 1 + rng.IntN(30)
		out = append(out, rowsCase{tr, dim, rng.IntN(tr + 1)})
	}
	for _, nrows := range oddSizes {
		if nrows <= maxRows {
			out = append(out, rowsCase{nrows + rng.IntN(50), 1 + rng.IntN(20), nrows})
		}
	}
	out = append(out, rowsCase{0, 4, 0}, rowsCase{600, 17, 500})
	if several {
		out = append(out, rowsCase{9000, 17, 8000}) // 3 pieces of up to 3855 rows
	}
	return out
}

// runRows runs optimSteps sparse steps on the given rows and returns the
// table and state tables.
func runRows(t *testing.T, b *CPU, o Optim, c rowsCase, table0 []float32, rows []int64, grads [][]float32) []float32 {
	t.Helper()
	s := newOptimState(o, table0)
	for step, g := range grads {
		gb, gfull := guarded(len(g), g)
		if err := b.UpdateRows(stepped(o, step+1), s.w, c.tableRows, c.dim, rows, gb, s.state...); err != nil {
			t.Fatalf("%+v %+v: %v", o, c, err)
		}
		checkGuards(t, "g", gfull)
		s.checkGuards(t)
	}
	return s.snapshot()
}

// Updating rows R of a table equals a dense update of each listed row
// (bit for bit: the same kernel runs on each row), and leaves every other
// row and its state untouched.
func TestUpdateRowsMatchesDensePerRow(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(24)
		for _, o := range optimCases {
			for _, c := range rowsCases(rng, false, 300) {
				table0 := randFloats(rng, c.tableRows*c.dim, -1, 1)
				rows := randDistinctRows(rng, c.tableRows, c.nrows)
				grads := randGrads(rng, optimSteps, c.nrows*c.dim)
				got := runRows(t, b, o, c, table0, rows, grads)

				want := newOptimState(o, table0)
				for step, g := range grads {
					for r, row := range rows {
						lo, hi := int(row)*c.dim, int(row+1)*c.dim
						st := make([]Buffer, len(want.state))
						for i := range st {
							st[i] = want.state[i].Slice(lo, hi)
						}
						if err := b.Update(stepped(o, step+1), want.w.Slice(lo, hi), HostBuffer(g[r*c.dim:(r+1)*c.dim]), st...); err != nil {
							t.Fatal(err)
						}
					}
				}
				assertClose(t, "table+state", got, want.snapshot(), 0, 0)
			}
		}
	})
}

func TestUpdateRowsMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	type sparseCase struct {
		o      Optim
		c      rowsCase
		table0 []float32
		rows   []int64
		grads  [][]float32
		scalar []float32
	}
	rng := newRNG(25)
	var cases []sparseCase
	for _, o := range optimCases {
		for _, c := range rowsCases(rng, true, 1<<20) {
			sc := sparseCase{o: o, c: c, table0: randFloats(rng, c.tableRows*c.dim, -1, 1),
				rows: randDistinctRows(rng, c.tableRows, c.nrows), grads: randGrads(rng, optimSteps, c.nrows*c.dim)}
			sc.scalar = runRows(t, ref, o, c, sc.table0, sc.rows, sc.grads)
			cases = append(cases, sc)
		}
	}
	forEachISA(t, func(t *testing.T, b *CPU) {
		single := sameISASingleThread(t, b)
		for _, sc := range cases {
			got := runRows(t, b, sc.o, sc.c, sc.table0, sc.rows, sc.grads)
			assertClose(t, "vs scalar", got, sc.scalar, 1e-4, 1e-6)
			if single != nil {
				assertClose(t, "vs 1 thread", got, runRows(t, single, sc.o, sc.c, sc.table0, sc.rows, sc.grads), 0, 0)
			}
		}
	})
}

func randDistinctRows(rng *rand.Rand, tableRows, n int) []int64 {
	perm := rng.Perm(tableRows)[:n]
	rows := make([]int64, n)
	for i, p := range perm {
		rows[i] = int64(p)
	}
	return rows
}

func TestUpdateBadInput(t *testing.T) {
	b := MustCPU()
	const n = 10
	adam := Optim{Kind: Adam, LR: 0.1, Beta1: 0.9, Beta2: 0.99, Step: 1}
	buf := func(k int) HostBuffer { return make(HostBuffer, k) }
	cases := []struct {
		name  string
		o     Optim
		g     Buffer
		state []Buffer
		want  error
	}{
		{"unknown kind", Optim{Kind: OptKind(9), LR: 0.1}, buf(n), nil, ErrArg},
		{"adam step 0", stepped(adam, 0), buf(n), []Buffer{buf(n), buf(n)}, ErrArg},
		{"adam beta1 1", Optim{Kind: Adam, Beta1: 1, Beta2: 0.9, Step: 1}, buf(n), []Buffer{buf(n), buf(n)}, ErrArg},
		{"adam one state", adam, buf(n), []Buffer{buf(n)}, ErrArg},
		{"sgd momentum no state", Optim{Kind: SGD, LR: 0.1, Momentum: 0.9}, buf(n), nil, ErrArg},
		{"sgd extra state", Optim{Kind: SGD, LR: 0.1}, buf(n), []Buffer{buf(n)}, ErrArg},
		{"adagrad short state", Optim{Kind: Adagrad, LR: 0.1}, buf(n), []Buffer{buf(n - 1)}, ErrShape},
		{"short g", Optim{Kind: SGD, LR: 0.1}, buf(n + 1), nil, ErrShape},
		{"nil g", Optim{Kind: SGD, LR: 0.1}, nil, nil, ErrArg},
		{"nil state", adam, buf(n), []Buffer{buf(n), nil}, ErrArg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := HostBuffer(randFloats(newRNG(26), n, -1, 1))
			before := slices.Clone(w)
			if err := b.Update(c.o, w, c.g, c.state...); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if !slices.Equal(w, before) {
				t.Fatal("w written despite the error")
			}
		})
	}
}

func TestUpdateRowsBadInput(t *testing.T) {
	b := MustCPU()
	const tableRows, dim = 6, 3
	adagrad := Optim{Kind: Adagrad, LR: 0.1, Eps: 1e-8}
	buf := func(k int) HostBuffer { return make(HostBuffer, k) }
	cases := []struct {
		name      string
		o         Optim
		tableRows int
		dim       int
		rows      []int64
		g         Buffer
		state     []Buffer
		want      error
	}{
		{"negative row", adagrad, tableRows, dim, []int64{0, -1}, buf(2 * dim), []Buffer{buf(tableRows * dim)}, ErrRange},
		{"row past table", adagrad, tableRows, dim, []int64{2, tableRows}, buf(2 * dim), []Buffer{buf(tableRows * dim)}, ErrRange},
		{"duplicate row", adagrad, tableRows, dim, []int64{1, 4, 2, 4}, buf(4 * dim), []Buffer{buf(tableRows * dim)}, ErrArg},
		{"short g", adagrad, tableRows, dim, []int64{1, 2}, buf(dim), []Buffer{buf(tableRows * dim)}, ErrShape},
		{"state shaped like g", adagrad, tableRows, dim, []int64{1, 2}, buf(2 * dim), []Buffer{buf(2 * dim)}, ErrShape},
		{"table shape", adagrad, tableRows + 1, dim, []int64{1}, buf(dim), []Buffer{buf(tableRows * dim)}, ErrShape},
		{"negative dim", adagrad, tableRows, -dim, nil, buf(0), []Buffer{buf(0)}, ErrArg},
		{"no state", adagrad, tableRows, dim, []int64{1}, buf(dim), nil, ErrArg},
		{"adam step 0", Optim{Kind: Adam, Beta1: 0.9, Beta2: 0.9}, tableRows, dim, []int64{1}, buf(dim),
			[]Buffer{buf(tableRows * dim), buf(tableRows * dim)}, ErrArg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			table := HostBuffer(randFloats(newRNG(27), tableRows*dim, -1, 1))
			g := c.g
			if h, ok := g.(HostBuffer); ok {
				copy(h, randFloats(newRNG(28), len(h), -1, 1))
			}
			before := slices.Clone(table)
			var states [][]float32
			for _, s := range c.state {
				states = append(states, slices.Clone(s.(HostBuffer)))
			}
			if err := b.UpdateRows(c.o, table, c.tableRows, c.dim, c.rows, g, c.state...); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if !slices.Equal(table, before) {
				t.Fatal("table written despite the error")
			}
			for i, s := range c.state {
				if !slices.Equal(s.(HostBuffer), states[i]) {
					t.Fatal("state written despite the error")
				}
			}
		})
	}
}

// The sparse-row kernels validate the rows themselves and write nothing
// when one is outside the table.
func TestUpdateRowsKernelValidates(t *testing.T) {
	const tableRows, dim = 6, 5
	for _, isa := range SupportedISAs() {
		for _, o := range optimCases {
			o = stepped(o, 1)
			for _, c := range []struct {
				rows []int64
				bad  int64
			}{{[]int64{0, tableRows}, 1}, {[]int64{-1, 2}, 0}, {[]int64{3, 2, math.MaxInt64}, 2}} {
				w := randFloats(newRNG(50), tableRows*dim, -1, 1)
				before := slices.Clone(w)
				state := make([][]float32, o.StateBuffers())
				for i := range state {
					state[i] = make([]float32, tableRows*dim)
				}
				g := randFloats(newRNG(51), len(c.rows)*dim, -1, 1)
				bad, err := rawUpdateRows(isa, o, tableRows, dim, w, c.rows, g, state...)
				if !errors.Is(err, ErrRange) || bad != c.bad {
					t.Fatalf("%s %+v rows %v: err %v bad %d, want ErrRange at %d", isa, o, c.rows, err, bad, c.bad)
				}
				if !slices.Equal(w, before) {
					t.Fatalf("%s %+v: w written despite the error", isa, o)
				}
				for _, s := range state {
					if slices.ContainsFunc(s, func(v float32) bool { return v != 0 }) {
						t.Fatalf("%s %+v: state written despite the error", isa, o)
					}
				}
			}
			if o.Kind != SGD { // SGD's velocity is optional in C: NULL means none
				w := make([]float32, tableRows*dim)
				if _, err := rawUpdateRows(isa, o, tableRows, dim, w, []int64{1}, make([]float32, dim)); !errors.Is(err, ErrArg) {
					t.Fatalf("%s %+v without state: err %v, want ErrArg", isa, o, err)
				}
			}
		}
	}
}

// BenchmarkUpdateRowsStep is a ctrdnn step's sparse Adam: 4,700 distinct
// rows of 9 of a 1M-row table, on 1 thread and on every CPU.
func BenchmarkUpdateRowsStep(b *testing.B) {
	const tableRows, dim, n = 1 << 20, 9, 4700
	rng := newRNG(41)
	rows := randDistinctRows(rng, tableRows, n)
	slices.Sort(rows)
	g := HostBuffer(randFloats(rng, n*dim, -1, 1))
	o := Optim{Kind: Adam, LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	table, m, v := make(HostBuffer, tableRows*dim), make(HostBuffer, tableRows*dim), make(HostBuffer, tableRows*dim)
	for _, threads := range []int{1, runtime.GOMAXPROCS(0)} {
		cpu, err := NewCPU(CPUOptions{Threads: threads})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			for b.Loop() {
				if err := cpu.UpdateRows(o, table, tableRows, dim, rows, g, m, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// subnormal is a float32 below the smallest normal one (2^-126).
const subnormal = float32(1e-39)

// Every optimiser op flushes subnormals to zero: a state that is subnormal
// (a dead unit's decaying Adam moment) and a zero gradient leave state 0,
// where IEEE arithmetic would keep it subnormal (and slow). The caller's
// floating-point mode is restored: Go code on the same thread still gets
// gradual underflow afterwards.
func TestUpdateFlushesSubnormals(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, o := range optimCases {
			if o.StateBuffers() == 0 {
				continue
			}
			const n = 37
			w, g := make(HostBuffer, n), make(HostBuffer, n) // w = 0: no weight decay term
			state := make([]Buffer, o.StateBuffers())
			for i := range state {
				state[i] = HostBuffer(slices.Repeat([]float32{subnormal}, n))
			}
			if o.Kind == Adagrad { // its state only grows: flushed on the way in (DAZ)
				g = slices.Repeat(HostBuffer{subnormal}, n)
			}
			if err := b.Update(stepped(o, 5), w, g, state...); err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(state[0].(HostBuffer), func(v float32) bool { return v != 0 }); i >= 0 {
				t.Fatalf("%s %+v: state[0][%d] = %g after a zero gradient, want flushed to 0", b.ISA(), o, i, state[0].(HostBuffer)[i])
			}
			table, st := HostBuffer(slices.Clone(w)), make([]Buffer, len(state))
			for i := range st {
				st[i] = HostBuffer(slices.Repeat([]float32{subnormal}, n))
			}
			if err := b.UpdateRows(stepped(o, 5), table, n, 1, []int64{3, 30}, g[:2], st...); err != nil {
				t.Fatal(err)
			}
			if got := st[0].(HostBuffer); got[3] != 0 || got[30] != 0 || got[4] != subnormal {
				t.Fatalf("%s %+v rows: state rows 3, 30, 4 = %g %g %g, want 0 0 %g (only listed rows updated)", b.ISA(), o, got[3], got[30], got[4], subnormal)
			}
		}
	})
	if halved := halve(subnormal); halved == 0 {
		t.Fatal("Go arithmetic flushes subnormals after an optimiser call: the floating-point mode was not restored")
	}
}

//go:noinline
func halve(x float32) float32 { return x / 2 }

// BenchmarkUpdateDense is dense Adam over ctrdnn's 295k dense parameters
// with normal moments and with subnormal ones (every first moment of a dead
// unit ends there): flushed, the two cost the same.
func BenchmarkUpdateDense(b *testing.B) {
	const n = 295361
	cpu, err := NewCPU(CPUOptions{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	o := Optim{Kind: Adam, LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 100}
	for _, moments := range []struct {
		name string
		m    float32
	}{{"normal", 1e-3}, {"subnormal", subnormal}} {
		b.Run(moments.name, func(b *testing.B) {
			w, g := make(HostBuffer, n), make(HostBuffer, n)
			m, v := make(HostBuffer, n), make(HostBuffer, n)
			b.SetBytes(7 * 4 * n)
			for b.Loop() {
				b.StopTimer()
				for i := range m {
					m[i], v[i] = moments.m, moments.m
				}
				b.StartTimer()
				if err := cpu.Update(o, w, g, m, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
