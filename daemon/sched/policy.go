package sched

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/heterps/heterps/native"
)

// Policy is a learned scheduling policy (HeterPS): a recurrent network that
// reads the layers in order and, at each, scores every resource type. Its
// input at layer l is the layer's features (kind, sizes, position, share of
// the model's cost) and the type features of the type chosen for layer l-1;
// a type's score is its feature vector (features.go: its rate, times and
// parallel fractions relative to the layer's best type, the stage-boundary
// cost of switching to it) dotted with M h + Mb, plus an additive attention
// term Va . tanh(phi A + h U + Ca) that lets the policy prefer a type whose
// features are not extreme in any direction; so one policy serves
// problems with any number of types: it can be pre-trained on random
// problems and fine-tuned on another. The cell is an LSTM or an Elman RNN.
type Policy struct {
	Cell     string    `json:"cell"` // "lstm" or "elman"
	Inputs   int       `json:"inputs"`
	Features int       `json:"features"`
	Hidden   int       `json:"hidden"`
	W        []float32 `json:"w"`  // [(Inputs+Hidden) x gates]: input and recurrent weights
	B        []float32 `json:"b"`  // [gates]
	M        []float32 `json:"m"`  // [Hidden x Features]: hidden state to type-feature weights
	Mb       []float32 `json:"mb"` // [Features]: the weights' state-independent part
	// The attention term, of width Attention.
	Attention int       `json:"attention"`
	A         []float32 `json:"a"`  // [Features x Attention]
	U         []float32 `json:"u"`  // [Hidden x Attention]
	Ca        []float32 `json:"ca"` // [Attention]
	Va        []float32 `json:"va"` // [Attention]
}

// rlAttention is the attention width of new policies.
const rlAttention = 16

// Cells.
const (
	CellLSTM  = "lstm"
	CellElman = "elman"
)

// inputSize: layer features, the previous choice's type features, a
// first-layer flag.
func inputSize() int { return layerFeatureCount() + typeFeatures + 1 }

func (pol *Policy) gates() int {
	if pol.Cell == CellLSTM {
		return 4 * pol.Hidden
	}
	return pol.Hidden
}

func newPolicy(cell string, hidden int, r *rand.Rand) *Policy {
	pol := &Policy{Cell: cell, Inputs: inputSize(), Features: typeFeatures, Hidden: hidden}
	g := pol.gates()
	pol.W = uniformInit(r, (pol.Inputs+hidden)*g, 1/math.Sqrt(float64(pol.Inputs+hidden)))
	pol.B = make([]float32, g)
	if cell == CellLSTM { // forget-gate bias 1: remember by default
		for j := hidden; j < 2*hidden; j++ {
			pol.B[j] = 1
		}
	}
	pol.M = uniformInit(r, hidden*typeFeatures, 1/math.Sqrt(float64(hidden)))
	pol.Mb = make([]float32, typeFeatures)
	pol.Attention = rlAttention
	pol.A = uniformInit(r, typeFeatures*rlAttention, 1/math.Sqrt(float64(typeFeatures)))
	pol.U = uniformInit(r, hidden*rlAttention, 1/math.Sqrt(float64(hidden)))
	pol.Ca = make([]float32, rlAttention)
	pol.Va = uniformInit(r, rlAttention, 1/math.Sqrt(float64(rlAttention)))
	return pol
}

func uniformInit(r *rand.Rand, n int, scale float64) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = float32((2*r.Float64() - 1) * scale)
	}
	return w
}

func (pol *Policy) clone() *Policy {
	c := *pol
	c.W, c.B, c.M, c.Mb = slices.Clone(pol.W), slices.Clone(pol.B), slices.Clone(pol.M), slices.Clone(pol.Mb)
	c.A, c.U, c.Ca, c.Va = slices.Clone(pol.A), slices.Clone(pol.U), slices.Clone(pol.Ca), slices.Clone(pol.Va)
	return &c
}

func (pol *Policy) params() []native.HostBuffer {
	return []native.HostBuffer{pol.W, pol.B, pol.M, pol.Mb, pol.A, pol.U, pol.Ca, pol.Va}
}

// Save writes the policy as JSON.
func (pol *Policy) Save(w io.Writer) error {
	return json.NewEncoder(w).Encode(pol)
}

// LoadPolicy reads a policy written by Save and checks its shapes; its
// errors say what is wrong (truncated, not JSON, a parameter of the wrong
// length), for the caller to name the file.
func LoadPolicy(r io.Reader) (*Policy, error) {
	var pol Policy
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pol); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("sched: policy: truncated (the JSON ends early): %w", err)
		}
		return nil, fmt.Errorf("sched: policy: not a policy file: %w", err)
	}
	if err := pol.check(); err != nil {
		return nil, err
	}
	return &pol, nil
}

var errPolicyShape = errors.New("sched: policy: shapes do not match")

func (pol *Policy) check() error {
	if pol.Cell != CellLSTM && pol.Cell != CellElman {
		return fmt.Errorf("sched: policy: unknown cell %q (want %q or %q)", pol.Cell, CellLSTM, CellElman)
	}
	if pol.Hidden < 1 || pol.Attention < 1 || pol.Inputs != inputSize() || pol.Features != typeFeatures {
		return fmt.Errorf("%w: %d inputs, %d type features, hidden %d, attention %d; this build reads %d inputs and %d type features (a policy from another version?)",
			errPolicyShape, pol.Inputs, pol.Features, pol.Hidden, pol.Attention, inputSize(), typeFeatures)
	}
	want := []struct {
		name string
		got  []float32
		n    int
	}{
		{"w", pol.W, (pol.Inputs + pol.Hidden) * pol.gates()}, {"b", pol.B, pol.gates()},
		{"m", pol.M, pol.Hidden * pol.Features}, {"mb", pol.Mb, pol.Features},
		{"a", pol.A, pol.Features * pol.Attention}, {"u", pol.U, pol.Hidden * pol.Attention},
		{"ca", pol.Ca, pol.Attention}, {"va", pol.Va, pol.Attention},
	}
	for _, w := range want {
		if len(w.got) != w.n {
			return fmt.Errorf("%w: %q has %d values, hidden size %d and attention %d need %d", errPolicyShape, w.name, len(w.got), pol.Hidden, pol.Attention, w.n)
		}
	}
	return nil
}

// rollout holds one batch of S sampled assignments and everything the
// backward pass needs, per layer l. Recurrent states are indexed l+1, with
// zero states at 0.
type rollout struct {
	s       int
	in      *policyInput
	x       []native.HostBuffer // [S x Inputs]
	gates   []native.HostBuffer // [S x gates] (LSTM: activated gates)
	c, h    []native.HostBuffer // [S x Hidden]
	probs   []native.HostBuffer // [S x Types]
	att     []native.HostBuffer // [S x Types x Attention]: tanh(phi A + h U + Ca)
	dyn     [][]float32         // [S x Types x dynamicFeatures]: the dynamic type features
	actions [][]int             // [S][layers]
}

// picker chooses assignment i's type for layer l from the policy's
// probabilities.
type picker func(i, l int, probs []float32) int

// sampler samples from the probabilities.
func sampler(r *rand.Rand) picker {
	return func(_, _ int, probs []float32) int { return native.SampleCategorical(probs, float32(r.Float64())) }
}

// mostLikely takes the most probable type.
func mostLikely(_, _ int, probs []float32) int { return native.Argmax(probs) }

// input writes the cell's input for assignment i at layer l into x: the
// layer's features and those its previous layer's type had when chosen.
func (ro *rollout) input(x []float32, i, l int) {
	n := copy(x, ro.in.layers[l])
	if l == 0 {
		x[len(x)-1] = 1
		return
	}
	T, D := ro.in.types, dynamicFeatures
	ro.in.typeRow(x[n:n+typeFeatures], l-1, ro.actions[i][l-1], ro.dyn[l-1][i*T*D:(i+1)*T*D])
}

// forward runs the policy over the layers for s assignments, picking each
// layer's type with pick.
func (pol *Policy) forward(be native.Backend, in *policyInput, s int, pick picker) (*rollout, error) {
	n, H, T, G, K, I := len(in.layers), pol.Hidden, in.types, pol.gates(), pol.Features, pol.Inputs
	ro := &rollout{s: s, in: in, actions: make([][]int, s)}
	for i := range ro.actions {
		ro.actions[i] = make([]int, n)
	}
	ro.c = append(ro.c, make(native.HostBuffer, s*H))
	ro.h = append(ro.h, make(native.HostBuffer, s*H))
	w, b, m := native.HostBuffer(pol.W), native.HostBuffer(pol.B), native.HostBuffer(pol.M)
	states := make([]stageState, s)
	for i := range states {
		states[i].typ = -1
	}
	for l := range n {
		dyn := make([]float32, s*T*dynamicFeatures)
		for i := range s {
			in.dynamic(dyn[i*T*dynamicFeatures:(i+1)*T*dynamicFeatures], l, states[i])
		}
		ro.dyn = append(ro.dyn, dyn)
		x := make(native.HostBuffer, s*I)
		for i := range s {
			ro.input(x[i*I:(i+1)*I], i, l)
		}
		z := make(native.HostBuffer, s*G)
		gemm(false, false, s, G, I, 1, x, I, w, G, 0, z, G)
		gemm(false, false, s, G, H, 1, ro.h[l], H, w[I*G:], G, 1, z, G)
		gates, cell, hidden := make(native.HostBuffer, s*G), make(native.HostBuffer, s*H), make(native.HostBuffer, s*H)
		var err error
		if pol.Cell == CellLSTM {
			err = be.LSTMForward(s, H, z, b, ro.c[l], gates, cell, hidden)
		} else {
			err = be.BiasAct(native.Tanh, s, H, z, b, hidden)
		}
		if err != nil {
			return nil, err
		}
		u := make(native.HostBuffer, s*K)
		for i := range s {
			copy(u[i*K:(i+1)*K], pol.Mb)
		}
		gemm(false, false, s, K, H, 1, hidden, H, m, K, 1, u, K)
		Ha := pol.Attention
		q := make(native.HostBuffer, s*Ha)
		for i := range s {
			copy(q[i*Ha:(i+1)*Ha], pol.Ca)
		}
		gemm(false, false, s, Ha, H, 1, hidden, H, pol.U, Ha, 1, q, Ha)
		logits := make(native.HostBuffer, s*T)
		att := make(native.HostBuffer, s*T*Ha)
		// phi = the layer's static features + each assignment's dynamic
		// ones (the static rows are zero in the dynamic columns), so the
		// static products are made once per layer.
		static, D := native.HostBuffer(in.static[l]), dynamicFeatures
		staticAtt := make(native.HostBuffer, T*Ha)
		gemm(false, false, T, Ha, K, 1, static, K, pol.A, Ha, 0, staticAtt, Ha)
		for i := range s {
			row, e, ui := logits[i*T:(i+1)*T], att[i*T*Ha:(i+1)*T*Ha], u[i*K:(i+1)*K]
			dyn := native.HostBuffer(ro.dyn[l][i*T*D : (i+1)*T*D])
			gemm(false, false, T, 1, K, 1, static, K, ui, 1, 0, row, 1)
			gemm(false, false, T, 1, D, 1, dyn, D, ui[featSwitch:], 1, 1, row, 1)
			copy(e, staticAtt)
			gemm(false, false, T, Ha, D, 1, dyn, D, pol.A[featSwitch*Ha:], Ha, 1, e, Ha)
			if err := be.BiasAct(native.Tanh, T, Ha, e, q[i*Ha:(i+1)*Ha], e); err != nil {
				return nil, err
			}
			gemm(false, false, T, 1, Ha, 1, e, Ha, pol.Va, 1, 1, row, 1)
		}
		ro.att = append(ro.att, att)
		if err := be.Softmax(s, T, logits, logits, false); err != nil {
			return nil, err
		}
		for i := range s {
			ro.actions[i][l] = pick(i, l, logits[i*T:(i+1)*T])
			states[i] = in.extend(states[i], l, ro.actions[i][l])
		}
		ro.x, ro.gates, ro.probs = append(ro.x, x), append(ro.gates, gates), append(ro.probs, logits)
		ro.c, ro.h = append(ro.c, cell), append(ro.h, hidden)
	}
	return ro, nil
}

// policyGrads has the shapes of a Policy's parameters.
type policyGrads struct{ w, b, m, mb, a, u, ca, va native.HostBuffer }

func (g *policyGrads) all() []native.HostBuffer {
	return []native.HostBuffer{g.w, g.b, g.m, g.mb, g.a, g.u, g.ca, g.va}
}

// backward returns the gradient of the REINFORCE loss
// -(1/S) sum_i sum_l (adv_i log pi(a_il) + entropy * H(pi_il)) by
// backpropagation through time; the entropy term keeps the policy exploring.
func (pol *Policy) backward(be native.Backend, ro *rollout, adv []float64, entropy float64) (*policyGrads, error) {
	n, s, H, T, G, K, I := len(ro.probs), ro.s, pol.Hidden, ro.in.types, pol.gates(), pol.Features, pol.Inputs
	g := &policyGrads{w: make(native.HostBuffer, len(pol.W)), b: make(native.HostBuffer, len(pol.B)),
		m: make(native.HostBuffer, len(pol.M)), mb: make(native.HostBuffer, len(pol.Mb)),
		a: make(native.HostBuffer, len(pol.A)), u: make(native.HostBuffer, len(pol.U)),
		ca: make(native.HostBuffer, len(pol.Ca)), va: make(native.HostBuffer, len(pol.Va))}
	Ha := pol.Attention
	de, dpre := make(native.HostBuffer, T*Ha), make(native.HostBuffer, T*Ha)
	m, recurrent := native.HostBuffer(pol.M), native.HostBuffer(pol.W[I*G:])
	dhNext := make(native.HostBuffer, s*H)
	var dcNext native.Buffer // nil: no gradient from beyond the last layer
	for l := n - 1; l >= 0; l-- {
		// d(-adv * log softmax)/dlogits = adv * (probs - onehot), over S;
		// the logits are phi u, so du = phi^T dlogits.
		du := make(native.HostBuffer, s*K)
		dq := make(native.HostBuffer, s*Ha)
		static, D := native.HostBuffer(ro.in.static[l]), dynamicFeatures
		dpreSum := make(native.HostBuffer, T*Ha)
		dlogits := make(native.HostBuffer, T)
		for i := range s {
			probs := ro.probs[l][i*T : (i+1)*T]
			scale := float32(adv[i] / float64(s))
			h := entropyOf(probs)
			for t, q := range probs {
				// d(-H)/dz_t = q_t (log q_t + H)
				dlogits[t] = scale*q + float32(entropy/float64(s))*q*(float32(logOrZero(q))+float32(h))
			}
			dlogits[ro.actions[i][l]] -= scale
			dui, dyn := du[i*K:(i+1)*K], native.HostBuffer(ro.dyn[l][i*T*D:(i+1)*T*D])
			gemm(true, false, K, 1, T, 1, static, K, dlogits, 1, 0, dui, 1)
			gemm(true, false, D, 1, T, 1, dyn, D, dlogits, 1, 1, dui[featSwitch:], 1)
			// The attention term: logits += tanh(phi A + q_i) Va.
			e := ro.att[l][i*T*Ha : (i+1)*T*Ha]
			gemm(true, false, Ha, 1, T, 1, e, Ha, dlogits, 1, 1, g.va, 1)
			clear(de)
			gemm(false, false, T, Ha, 1, 1, dlogits, 1, pol.Va, Ha, 0, de, Ha)
			if err := be.BiasActBackward(native.Tanh, T, Ha, e, de, dpre, dq[i*Ha:(i+1)*Ha]); err != nil {
				return nil, err
			}
			for j, x := range dpre {
				dpreSum[j] += x
			}
			gemm(true, false, D, Ha, T, 1, dyn, D, dpre, Ha, 1, g.a[featSwitch*Ha:], Ha)
		}
		gemm(true, false, K, Ha, T, 1, static, K, dpreSum, Ha, 1, g.a, Ha)
		gemm(true, false, H, Ha, s, 1, ro.h[l+1], H, dq, Ha, 1, g.u, Ha)
		addColumnSums(g.ca, dq, s, Ha)
		gemm(true, false, H, K, s, 1, ro.h[l+1], H, du, K, 1, g.m, K)
		addColumnSums(g.mb, du, s, K)
		dh := slices.Clone(dhNext)
		gemm(false, true, s, H, K, 1, du, K, m, K, 1, dh, H)
		gemm(false, true, s, H, Ha, 1, dq, Ha, pol.U, Ha, 1, dh, H)
		dz := make(native.HostBuffer, s*G)
		if pol.Cell == CellLSTM {
			dcPrev := make(native.HostBuffer, s*H)
			if err := be.LSTMBackward(s, H, ro.gates[l], ro.c[l], ro.c[l+1], dh, dcNext, dz, dcPrev); err != nil {
				return nil, err
			}
			dcNext = dcPrev
		} else if err := be.BiasActBackward(native.Tanh, s, H, ro.h[l+1], dh, dz, nil); err != nil {
			return nil, err
		}
		addColumnSums(g.b, dz, s, G)
		gemm(true, false, I, G, s, 1, ro.x[l], I, dz, G, 1, g.w, G)
		gemm(true, false, H, G, s, 1, ro.h[l], H, dz, G, 1, g.w[I*G:], G)
		gemm(false, true, s, H, G, 1, dz, G, recurrent, G, 0, dhNext, H)
	}
	return g, nil
}

func entropyOf(probs []float32) float64 {
	var h float64
	for _, q := range probs {
		h -= float64(q) * logOrZero(q)
	}
	return h
}

func logOrZero(q float32) float64 {
	if q <= 0 {
		return 0
	}
	return math.Log(float64(q))
}

// gemm is C = alpha*op(A)*op(B) + beta*C on row-major float32 matrices, in
// pure Go (gonum): the policy's matrices are tiny, so a cgo call and
// OpenBLAS's threads cost more than they save, and the result must not
// depend on the machine's thread count (a seeded run is reproducible).
func gemm(transA, transB bool, m, n, k int, alpha float32, a native.HostBuffer, lda int,
	b native.HostBuffer, ldb int, beta float32, c native.HostBuffer, ldc int) {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	op := func(t bool) blas.Transpose {
		if t {
			return blas.Trans
		}
		return blas.NoTrans
	}
	blas32.Gemm(op(transA), op(transB), alpha,
		blas32.General{Rows: ar, Cols: ac, Stride: lda, Data: a},
		blas32.General{Rows: br, Cols: bc, Stride: ldb, Data: b}, beta,
		blas32.General{Rows: m, Cols: n, Stride: ldc, Data: c})
}

func addColumnSums(dst, m native.HostBuffer, rows, cols int) {
	for i := range rows {
		for j := range cols {
			dst[j] += m[i*cols+j]
		}
	}
}

// clip scales the gradients down to a global norm of at most limit.
func (g *policyGrads) clip(limit float64) {
	var sq float64
	for _, buf := range g.all() {
		for _, x := range buf {
			sq += float64(x) * float64(x)
		}
	}
	if norm := math.Sqrt(sq); norm > limit {
		scale := float32(limit / norm)
		for _, buf := range g.all() {
			for i := range buf {
				buf[i] *= scale
			}
		}
	}
}
