package place

import (
	"math"
	"math/rand/v2"
	"testing"
)

// forced replays given placements.
func forced(actions [][]int) pickFunc {
	return func(i, g int, _ []float32) int { return actions[i][g] }
}

// surrogate is the REINFORCE loss without entropy for fixed placements:
// -(1/S) sum_i adv_i sum_g log pi(a_ig).
func surrogate(t *testing.T, p *policy, x [][]float32, actions [][]int, adv []float64) float64 {
	be, err := policyBackend()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := p.forward(be, x, len(actions), forced(actions))
	if err != nil {
		t.Fatal(err)
	}
	var loss float64
	for i := range actions {
		for g, a := range actions[i] {
			loss -= adv[i] * math.Log(float64(ep.probs[g][i*p.D+a])) / float64(len(actions))
		}
	}
	return loss
}

// TestPolicyGradientMatchesFiniteDifferences checks backpropagation through
// the decoder, the attention and the encoder against central differences
// on every parameter.
func TestPolicyGradientMatchesFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	G, F, D, H, S := 5, 6, 3, 4, 3
	p := newPolicy(F, D, H, r)
	for _, w := range p.params() { // larger weights: states far from 0, every path matters
		for j := range w {
			w[j] *= 3
		}
	}
	x := make([][]float32, G)
	for g := range x {
		x[g] = uniform(r, F, 2)
	}
	actions := make([][]int, S)
	for i := range actions {
		actions[i] = make([]int, G)
		for g := range actions[i] {
			actions[i][g] = r.IntN(D)
		}
	}
	adv := []float64{1, -0.5, 2}
	be, _ := policyBackend()
	ep, err := p.forward(be, x, S, forced(actions))
	if err != nil {
		t.Fatal(err)
	}
	grads, err := p.backward(be, ep, adv, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"We", "Be", "Wd", "Bd", "Wo", "Bo"}
	for k, w := range p.params() {
		for j := range w {
			old := w[j]
			const eps = 1e-2
			w[j] = old + eps
			up := surrogate(t, p, x, actions, adv)
			w[j] = old - eps
			down := surrogate(t, p, x, actions, adv)
			w[j] = old
			num := (up - down) / (2 * eps)
			if got := float64(grads[k][j]); math.Abs(got-num) > 1e-3+0.03*math.Abs(num) {
				t.Errorf("%s[%d]: backprop %.5f, finite differences %.5f", names[k], j, got, num)
			}
		}
	}
}
