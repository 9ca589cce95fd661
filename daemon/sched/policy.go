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

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// Policy is a learned scheduling policy (HeterPS): a recurrent network that
// reads the layers in order and, at each, outputs a softmax over the
// resource types. Its input at layer l is the layer's features (one-hot
// index, one-hot kind, input and weight sizes, compute and communication
// time) and the type chosen for layer l-1. The cell is an LSTM or an Elman
// RNN. A policy can be saved and reused as the starting point on another
// problem with the same number of types.
type Policy struct {
	Cell   string    `json:"cell"` // "lstm" or "elman"
	Types  int       `json:"types"`
	Inputs int       `json:"inputs"`
	Hidden int       `json:"hidden"`
	W      []float32 `json:"w"` // [(Inputs+Hidden) x gates]: input and recurrent weights
	B      []float32 `json:"b"` // [gates]
	V      []float32 `json:"v"` // [Hidden x Types]: output weights
	C      []float32 `json:"c"` // [Types]: output bias
	// Stay is added to the logit of the previous layer's type: a learned
	// preference for extending the current stage rather than starting one.
	Stay []float32 `json:"stay"` // [1]
}

// Cells.
const (
	CellLSTM  = "lstm"
	CellElman = "elman"
)

// Feature layout: one-hot layer index (capped), one-hot kind, 4 scalars,
// one-hot previous type (plus "none" for the first layer).
const maxIndexFeature = 64

var kindFeatures = append(slices.Clone(config.LayerKinds), "other")

func inputSize(types int) int { return maxIndexFeature + len(kindFeatures) + 4 + types + 1 }

func (pol *Policy) gates() int {
	if pol.Cell == CellLSTM {
		return 4 * pol.Hidden
	}
	return pol.Hidden
}

func newPolicy(cell string, types, hidden int, r *rand.Rand) *Policy {
	pol := &Policy{Cell: cell, Types: types, Inputs: inputSize(types), Hidden: hidden}
	g := pol.gates()
	pol.W = uniformInit(r, (pol.Inputs+hidden)*g, 1/math.Sqrt(float64(pol.Inputs+hidden)))
	pol.B = make([]float32, g)
	if cell == CellLSTM { // forget-gate bias 1: remember by default
		for j := hidden; j < 2*hidden; j++ {
			pol.B[j] = 1
		}
	}
	pol.V = uniformInit(r, hidden*types, 1/math.Sqrt(float64(hidden)))
	pol.C = make([]float32, types)
	pol.Stay = []float32{rlStayInit}
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
	c.W, c.B, c.V, c.C, c.Stay = slices.Clone(pol.W), slices.Clone(pol.B), slices.Clone(pol.V), slices.Clone(pol.C), slices.Clone(pol.Stay)
	return &c
}

// Save writes the policy as JSON.
func (pol *Policy) Save(w io.Writer) error {
	return json.NewEncoder(w).Encode(pol)
}

// LoadPolicy reads a policy written by Save and checks its shapes.
func LoadPolicy(r io.Reader) (*Policy, error) {
	var pol Policy
	if err := json.NewDecoder(r).Decode(&pol); err != nil {
		return nil, fmt.Errorf("sched: policy: %w", err)
	}
	if err := pol.check(); err != nil {
		return nil, err
	}
	return &pol, nil
}

var errPolicyShape = errors.New("sched: policy: shapes do not match")

func (pol *Policy) check() error {
	if pol.Cell != CellLSTM && pol.Cell != CellElman {
		return fmt.Errorf("sched: policy: unknown cell %q", pol.Cell)
	}
	if pol.Types < 1 || pol.Hidden < 1 || pol.Inputs != inputSize(pol.Types) ||
		len(pol.W) != (pol.Inputs+pol.Hidden)*pol.gates() || len(pol.B) != pol.gates() ||
		len(pol.V) != pol.Hidden*pol.Types || len(pol.C) != pol.Types || len(pol.Stay) != 1 {
		return errPolicyShape
	}
	return nil
}

// layerFeatures returns each layer's features (without the previous type):
// one-hot index, one-hot kind, log sizes, and the layer's mean compute and
// communication times, normalised over the layers.
func layerFeatures(p *Problem) [][]float32 {
	n, nt := len(p.Layers), len(p.Types)
	width := maxIndexFeature + len(kindFeatures) + 4
	feats := make([][]float32, n)
	oct, odt := make([]float64, n), make([]float64, n)
	var maxOct, maxOdt float64
	for l, ly := range p.Layers {
		for t := range nt {
			oct[l] += ly.OCT[t] / float64(nt)
			odt[l] += ly.ODT[t] / float64(nt)
		}
		maxOct, maxOdt = math.Max(maxOct, oct[l]), math.Max(maxOdt, odt[l])
	}
	for l, ly := range p.Layers {
		f := make([]float32, width)
		f[min(l, maxIndexFeature-1)] = 1
		kind := slices.Index(kindFeatures, ly.Kind)
		if kind < 0 {
			kind = len(kindFeatures) - 1
		}
		f[maxIndexFeature+kind] = 1
		at := maxIndexFeature + len(kindFeatures)
		f[at] = float32(math.Log1p(float64(ly.InputSize)) / 20)
		f[at+1] = float32(math.Log1p(float64(ly.WeightSize)) / 20)
		f[at+2] = float32(oct[l] / maxOct)
		if maxOdt > 0 {
			f[at+3] = float32(odt[l] / maxOdt)
		}
		feats[l] = f
	}
	return feats
}

// rollout holds one batch of S sampled assignments and everything the
// backward pass needs, per layer l. Recurrent states are indexed l+1, with
// zero states at 0.
type rollout struct {
	s       int
	feats   [][]float32
	gates   []native.HostBuffer // [S x gates] (LSTM: activated gates)
	c, h    []native.HostBuffer // [S x Hidden]
	probs   []native.HostBuffer // [S x Types]
	actions [][]int             // [S][layers]
}

// previous is the row of W's previous-type block that assignment i reads
// at layer l: the type of layer l-1, or Types for the first layer.
func (ro *rollout) previous(i, l, types int) int {
	if l == 0 {
		return types
	}
	return ro.actions[i][l-1]
}

// picker chooses assignment i's type for layer l from the policy's
// probabilities.
type picker func(i, l int, probs []float32) int

// sampler samples from the probabilities.
func sampler(r *rand.Rand) picker {
	return func(_, _ int, probs []float32) int {
		u, acc := float32(r.Float64()), float32(0)
		for t, q := range probs {
			if acc += q; u < acc {
				return t
			}
		}
		return len(probs) - 1
	}
}

// mostLikely takes the most probable type.
func mostLikely(_, _ int, probs []float32) int {
	best := 0
	for t, q := range probs {
		if q > probs[best] {
			best = t
		}
	}
	return best
}

// forward runs the policy over the layers for s assignments, picking each
// layer's type with pick. The input is mostly one-hot, so instead of one
// GEMM on [features, previous type, h] it adds the features' product with W
// (the same for every assignment), the W row of each assignment's previous
// type, and h times the recurrent block of W.
func (pol *Policy) forward(be native.Backend, feats [][]float32, s int, pick picker) (*rollout, error) {
	n, H, T, G := len(feats), pol.Hidden, pol.Types, pol.gates()
	F := len(feats[0])
	ro := &rollout{s: s, feats: feats, actions: make([][]int, s)}
	for i := range ro.actions {
		ro.actions[i] = make([]int, n)
	}
	ro.c = append(ro.c, make(native.HostBuffer, s*H))
	ro.h = append(ro.h, make(native.HostBuffer, s*H))
	w, b, v, c := native.HostBuffer(pol.W), native.HostBuffer(pol.B), native.HostBuffer(pol.V), native.HostBuffer(pol.C)
	recurrent := w[pol.Inputs*G:]
	for l := range n {
		base := make(native.HostBuffer, G)
		gemm(false, false, 1, G, F, 1, feats[l], F, w, G, 0, base, G)
		z := make(native.HostBuffer, s*G)
		gemm(false, false, s, G, H, 1, ro.h[l], H, recurrent, G, 0, z, G)
		for i := range s {
			prev := w[(F+ro.previous(i, l, T))*G:][:G]
			row := z[i*G : (i+1)*G]
			for j := range row {
				row[j] += base[j] + prev[j]
			}
		}
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
		logits := make(native.HostBuffer, s*T)
		gemm(false, false, s, T, H, 1, hidden, H, v, T, 0, logits, T)
		if err := be.BiasAct(native.Identity, s, T, logits, c, logits); err != nil {
			return nil, err
		}
		if l > 0 {
			for i := range s {
				logits[i*T+ro.actions[i][l-1]] += pol.Stay[0]
			}
		}
		if err := be.Softmax(s, T, logits, logits, false); err != nil {
			return nil, err
		}
		for i := range s {
			ro.actions[i][l] = pick(i, l, logits[i*T:(i+1)*T])
		}
		ro.gates, ro.probs = append(ro.gates, gates), append(ro.probs, logits)
		ro.c, ro.h = append(ro.c, cell), append(ro.h, hidden)
	}
	return ro, nil
}

// policyGrads has the shapes of a Policy's parameters.
type policyGrads struct{ w, b, v, c, stay native.HostBuffer }

// backward returns the gradient of the REINFORCE loss
// -(1/S) sum_i sum_l (adv_i log pi(a_il) + entropy * H(pi_il)) by
// backpropagation through time; the entropy term keeps the policy exploring.
func (pol *Policy) backward(be native.Backend, ro *rollout, adv []float64, entropy float64) (*policyGrads, error) {
	n, s, H, T, G := len(ro.probs), ro.s, pol.Hidden, pol.Types, pol.gates()
	g := &policyGrads{w: make(native.HostBuffer, len(pol.W)), b: make(native.HostBuffer, len(pol.B)),
		v: make(native.HostBuffer, len(pol.V)), c: make(native.HostBuffer, len(pol.C)), stay: make(native.HostBuffer, 1)}
	v, recurrent := native.HostBuffer(pol.V), native.HostBuffer(pol.W[pol.Inputs*G:])
	dhNext := make(native.HostBuffer, s*H)
	var dcNext native.Buffer // nil: no gradient from beyond the last layer
	for l := n - 1; l >= 0; l-- {
		// d(-adv * log softmax)/dlogits = adv * (probs - onehot), over S.
		dlogits := make(native.HostBuffer, s*T)
		for i := range s {
			probs := ro.probs[l][i*T : (i+1)*T]
			scale := float32(adv[i] / float64(s))
			h := entropyOf(probs)
			for t, q := range probs {
				// d(-H)/dz_t = q_t (log q_t + H)
				dlogits[i*T+t] = scale*q + float32(entropy/float64(s))*q*(float32(logOrZero(q))+float32(h))
			}
			dlogits[i*T+ro.actions[i][l]] -= scale
			if l > 0 {
				g.stay[0] += dlogits[i*T+ro.actions[i][l-1]]
			}
		}
		gemm(true, false, H, T, s, 1, ro.h[l+1], H, dlogits, T, 1, g.v, T)
		addColumnSums(g.c, dlogits, s, T)
		dh := slices.Clone(dhNext)
		gemm(false, true, s, H, T, 1, dlogits, T, v, T, 1, dh, H)
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
		pol.accumulateInputGrads(g, ro, l, dz)
		gemm(false, true, s, H, G, 1, dz, G, recurrent, G, 0, dhNext, H)
	}
	return g, nil
}

// accumulateInputGrads adds layer l's share of the gradients of b and W,
// given dz, the gradient of the gate pre-activations: the features' rows get
// the features times the column sums of dz, each previous type's row its
// assignments' rows of dz, and the recurrent block h_{l-1}^T dz.
func (pol *Policy) accumulateInputGrads(g *policyGrads, ro *rollout, l int, dz native.HostBuffer) {
	s, H, G := ro.s, pol.Hidden, pol.gates()
	feats := ro.feats[l]
	sums := make(native.HostBuffer, G)
	addColumnSums(sums, dz, s, G)
	for j, x := range sums {
		g.b[j] += x
	}
	for f, x := range feats {
		if x == 0 {
			continue
		}
		row := g.w[f*G : (f+1)*G]
		for j := range row {
			row[j] += x * sums[j]
		}
	}
	for i := range s {
		row := g.w[(len(feats)+ro.previous(i, l, pol.Types))*G:][:G]
		for j, x := range dz[i*G : (i+1)*G] {
			row[j] += x
		}
	}
	gemm(true, false, H, G, s, 1, ro.h[l], H, dz, G, 1, g.w[pol.Inputs*G:], G)
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
	for _, buf := range []native.HostBuffer{g.w, g.b, g.v, g.c, g.stay} {
		for _, x := range buf {
			sq += float64(x) * float64(x)
		}
	}
	if norm := math.Sqrt(sq); norm > limit {
		scale := float32(limit / norm)
		for _, buf := range []native.HostBuffer{g.w, g.b, g.v, g.c, g.stay} {
			for i := range buf {
				buf[i] *= scale
			}
		}
	}
}
