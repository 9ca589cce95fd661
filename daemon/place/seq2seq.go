package place

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/heterps/heterps/native"
)

// policy is the paper's sequence-to-sequence placer: an LSTM encoder reads
// the co-location groups' features in graph order; an LSTM decoder emits a
// device per group, its input the group's features and the device chosen
// for the group before, and its output layer sees its state beside an
// attention context (dot-product attention over every encoder state). The
// LSTM cells' pointwise parts run on the native kernels.
type policy struct {
	F, D, H int // features per group, devices, hidden units
	// We [(F+H) x 4H], Be [4H]: encoder. Wd [(F+D+1+H) x 4H], Bd [4H]:
	// decoder (input: features, previous device one-hot with a "start"
	// slot, state). Wo [2H x D], Bo [D]: output layer on [state, context].
	We, Be, Wd, Bd, Wo, Bo []float32
}

func newPolicy(F, D, H int, r *rand.Rand) *policy {
	p := &policy{F: F, D: D, H: H}
	p.We = uniform(r, (F+H)*4*H, 1/math.Sqrt(float64(F+H)))
	p.Be = forgetBias(H)
	p.Wd = uniform(r, (F+D+1+H)*4*H, 1/math.Sqrt(float64(F+D+1+H)))
	p.Bd = forgetBias(H)
	p.Wo = uniform(r, 2*H*D, 1/math.Sqrt(float64(2*H)))
	p.Bo = make([]float32, D)
	return p
}

// params lists the parameters in a fixed order (gradients use the same).
func (p *policy) params() [][]float32 { return [][]float32{p.We, p.Be, p.Wd, p.Bd, p.Wo, p.Bo} }

func uniform(r *rand.Rand, n int, scale float64) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = float32((2*r.Float64() - 1) * scale)
	}
	return w
}

// forgetBias is an LSTM bias with the forget gate at 1 (remember by
// default).
func forgetBias(H int) []float32 {
	b := make([]float32, 4*H)
	for j := H; j < 2*H; j++ {
		b[j] = 1
	}
	return b
}

// pickFunc chooses sample i's device for group g from its probabilities.
type pickFunc func(i, g int, probs []float32) int

func sampleFrom(r *rand.Rand) pickFunc {
	return func(_, _ int, probs []float32) int { return native.SampleCategorical(probs, float32(r.Float64())) }
}

func argmax(_, _ int, probs []float32) int { return native.Argmax(probs) }

// episode is one batch of S placements and what the backward pass needs.
// Recurrent states are indexed g+1, zero at 0.
type episode struct {
	S        int
	x        [][]float32         // group features
	encIn    []native.HostBuffer // [1 x (F+H)] per group
	encGates []native.HostBuffer
	encC     []native.HostBuffer // [1 x H]
	E        native.HostBuffer   // [G x H] encoder outputs
	decIn    []native.HostBuffer // [S x (F+D+1+H)]
	decGates []native.HostBuffer
	decC     []native.HostBuffer // [S x H]
	decH     []native.HostBuffer // [S x H]
	attn     []native.HostBuffer // [S x G]
	out      []native.HostBuffer // [S x 2H]: state and context
	probs    []native.HostBuffer // [S x D]
	actions  [][]int             // [S][G]
}

// forward runs the encoder once and the decoder for S placements.
func (p *policy) forward(be native.Backend, x [][]float32, S int, pick pickFunc) (*episode, error) {
	G, F, D, H := len(x), p.F, p.D, p.H
	mm := &gemms{be: be}
	ep := &episode{S: S, x: x, E: make(native.HostBuffer, G*H), actions: make([][]int, S)}
	for i := range ep.actions {
		ep.actions[i] = make([]int, G)
	}
	hPrev, cPrev := make(native.HostBuffer, H), make(native.HostBuffer, H)
	ep.encC = append(ep.encC, cPrev)
	for g := range G {
		in := append(slices.Clone(native.HostBuffer(x[g])), hPrev...)
		z := make(native.HostBuffer, 4*H)
		mm.gemm(false, false, 1, 4*H, F+H, 1, in, F+H, p.We, 4*H, 0, z, 4*H)
		gates, c, h := make(native.HostBuffer, 4*H), make(native.HostBuffer, H), ep.E[g*H:(g+1)*H]
		if err := be.LSTMForward(1, H, z, native.HostBuffer(p.Be), cPrev, gates, c, h); err != nil {
			return nil, err
		}
		ep.encIn, ep.encGates, ep.encC = append(ep.encIn, in), append(ep.encGates, gates), append(ep.encC, c)
		hPrev, cPrev = h, c
	}
	I := F + D + 1 + H
	ep.decC = append(ep.decC, make(native.HostBuffer, S*H))
	ep.decH = append(ep.decH, make(native.HostBuffer, S*H))
	scale := float32(1 / math.Sqrt(float64(H)))
	for g := range G {
		in := make(native.HostBuffer, S*I)
		for i := range S {
			row := in[i*I : (i+1)*I]
			copy(row, x[g])
			prev := D
			if g > 0 {
				prev = ep.actions[i][g-1]
			}
			row[F+prev] = 1
			copy(row[F+D+1:], ep.decH[g][i*H:(i+1)*H])
		}
		z := make(native.HostBuffer, S*4*H)
		mm.gemm(false, false, S, 4*H, I, 1, in, I, p.Wd, 4*H, 0, z, 4*H)
		gates, c, h := make(native.HostBuffer, S*4*H), make(native.HostBuffer, S*H), make(native.HostBuffer, S*H)
		if err := be.LSTMForward(S, H, z, native.HostBuffer(p.Bd), ep.decC[g], gates, c, h); err != nil {
			return nil, err
		}
		attn := make(native.HostBuffer, S*G)
		mm.gemm(false, true, S, G, H, scale, h, H, ep.E, H, 0, attn, G)
		if err := be.Softmax(S, G, attn, attn, false); err != nil {
			return nil, err
		}
		ctx := make(native.HostBuffer, S*H)
		mm.gemm(false, false, S, H, G, 1, attn, G, ep.E, H, 0, ctx, H)
		out := make(native.HostBuffer, S*2*H)
		for i := range S {
			copy(out[i*2*H:], h[i*H:(i+1)*H])
			copy(out[i*2*H+H:], ctx[i*H:(i+1)*H])
		}
		logits := make(native.HostBuffer, S*D)
		mm.gemm(false, false, S, D, 2*H, 1, out, 2*H, p.Wo, D, 0, logits, D)
		if err := be.BiasAct(native.Identity, S, D, logits, native.HostBuffer(p.Bo), logits); err != nil {
			return nil, err
		}
		if err := be.Softmax(S, D, logits, logits, false); err != nil {
			return nil, err
		}
		for i := range S {
			ep.actions[i][g] = pick(i, g, logits[i*D:(i+1)*D])
		}
		ep.decIn, ep.decGates = append(ep.decIn, in), append(ep.decGates, gates)
		ep.decC, ep.decH = append(ep.decC, c), append(ep.decH, h)
		ep.attn, ep.out, ep.probs = append(ep.attn, attn), append(ep.out, out), append(ep.probs, logits)
	}
	if mm.err != nil {
		return nil, fmt.Errorf("rl: policy forward: %w", mm.err)
	}
	return ep, nil
}

// backward returns the gradients (in params order) of the REINFORCE loss
// -(1/S) sum_i sum_g (adv_i log pi(a_ig) + entropy H(pi_ig)), by
// backpropagation through the decoder, the attention and the encoder.
func (p *policy) backward(be native.Backend, ep *episode, adv []float64, entropy float64) ([][]float32, error) {
	G, S, F, D, H := len(ep.x), ep.S, p.F, p.D, p.H
	I := F + D + 1 + H
	mm := &gemms{be: be}
	grads := make([][]float32, 6)
	for k, w := range p.params() {
		grads[k] = make([]float32, len(w))
	}
	dWe, dBe, dWd, dBd, dWo, dBo := grads[0], grads[1], grads[2], grads[3], grads[4], grads[5]
	dE := make(native.HostBuffer, G*H)
	dhNext := make(native.HostBuffer, S*H)
	var dcNext native.Buffer
	scale := float32(1 / math.Sqrt(float64(H)))
	for g := G - 1; g >= 0; g-- {
		dlogits := policyGradLogits(ep, g, adv, entropy, D)
		mm.gemm(true, false, 2*H, D, S, 1, ep.out[g], 2*H, dlogits, D, 1, dWo, D)
		columnSums(dBo, dlogits, S, D)
		dout := make(native.HostBuffer, S*2*H)
		mm.gemm(false, true, S, 2*H, D, 1, dlogits, D, p.Wo, D, 0, dout, 2*H)
		dh := slices.Clone(dhNext)
		dctx := make(native.HostBuffer, S*H)
		for i := range S {
			for j := range H {
				dh[i*H+j] += dout[i*2*H+j]
				dctx[i*H+j] = dout[i*2*H+H+j]
			}
		}
		// ctx = A E: dA = dctx E^T, dE += A^T dctx.
		A := ep.attn[g]
		dA := make(native.HostBuffer, S*G)
		mm.gemm(false, true, S, G, H, 1, dctx, H, ep.E, H, 0, dA, G)
		mm.gemm(true, false, G, H, S, 1, A, G, dctx, H, 1, dE, H)
		// A = softmax(scale h E^T): dscores = A (dA - sum(A dA)).
		for i := range S {
			row, drow := A[i*G:(i+1)*G], dA[i*G:(i+1)*G]
			var dot float32
			for j := range G {
				dot += row[j] * drow[j]
			}
			for j := range G {
				drow[j] = row[j] * (drow[j] - dot)
			}
		}
		mm.gemm(false, false, S, H, G, scale, dA, G, ep.E, H, 1, dh, H)
		mm.gemm(true, false, G, H, S, scale, dA, G, ep.decH[g+1], H, 1, dE, H)
		dz, dcPrev := make(native.HostBuffer, S*4*H), make(native.HostBuffer, S*H)
		if err := be.LSTMBackward(S, H, ep.decGates[g], ep.decC[g], ep.decC[g+1], dh, dcNext, dz, dcPrev); err != nil {
			return nil, err
		}
		dcNext = dcPrev
		mm.gemm(true, false, I, 4*H, S, 1, ep.decIn[g], I, dz, 4*H, 1, dWd, 4*H)
		columnSums(dBd, dz, S, 4*H)
		mm.gemm(false, true, S, H, 4*H, 1, dz, 4*H, p.Wd[(F+D+1)*4*H:], 4*H, 0, dhNext, H)
	}
	dhEnc := make(native.HostBuffer, H)
	var dcEnc native.Buffer
	for g := G - 1; g >= 0; g-- {
		dh := slices.Clone(dhEnc)
		for j := range H {
			dh[j] += dE[g*H+j]
		}
		dz, dcPrev := make(native.HostBuffer, 4*H), make(native.HostBuffer, H)
		if err := be.LSTMBackward(1, H, ep.encGates[g], ep.encC[g], ep.encC[g+1], dh, dcEnc, dz, dcPrev); err != nil {
			return nil, err
		}
		dcEnc = dcPrev
		mm.gemm(true, false, F+H, 4*H, 1, 1, ep.encIn[g], F+H, dz, 4*H, 1, dWe, 4*H)
		columnSums(dBe, dz, 1, 4*H)
		mm.gemm(false, true, 1, H, 4*H, 1, dz, 4*H, p.We[F*4*H:], 4*H, 0, dhEnc, H)
	}
	if mm.err != nil {
		return nil, fmt.Errorf("rl: policy backward: %w", mm.err)
	}
	return grads, nil
}

// policyGradLogits is the loss's gradient in group g's logits:
// adv (probs - onehot) / S, plus the entropy bonus's d(-H)/dz = q (log q + H).
func policyGradLogits(ep *episode, g int, adv []float64, entropy float64, D int) native.HostBuffer {
	S := ep.S
	d := make(native.HostBuffer, S*D)
	for i := range S {
		probs := ep.probs[g][i*D : (i+1)*D]
		a := float32(adv[i] / float64(S))
		h := entropyOf(probs)
		for k, q := range probs {
			d[i*D+k] = a*q + float32(entropy/float64(S)*float64(q)*(logOrZero(q)+h))
		}
		d[i*D+ep.actions[i][g]] -= a
	}
	return d
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

func columnSums(dst []float32, m native.HostBuffer, rows, cols int) {
	for i := range rows {
		for j := range cols {
			dst[j] += m[i*cols+j]
		}
	}
}

// gemms runs the policy's GEMMs on the backend (OpenBLAS on one thread:
// deterministic for a seed), keeping the first error so that the maths
// reads as maths; callers check err once.
type gemms struct {
	be  native.Backend
	err error
}

// gemm is C = alpha op(A) op(B) + beta C on row-major matrices.
func (g *gemms) gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	if g.err != nil {
		return
	}
	g.err = g.be.Gemm(transA, transB, m, n, k, alpha, native.HostBuffer(a), lda, native.HostBuffer(b), ldb, beta, native.HostBuffer(c), ldc)
}
