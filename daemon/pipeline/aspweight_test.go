package pipeline

import (
	"context"
	"math"
	"testing"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
)

// TestASPPushCountsPerSample: in ASP a replica's push is applied on
// arrival with weight b_k/mean(b) of the stage's share, so that a sample
// counts alike whichever replica trained on it. Replica 0 of a stage with
// batches (3, 5) runs one step alone: its update of every parameter is 3/4
// of the update the same step makes when the share is (3, 3) (weight 1;
// SGD's first step is linear in the gradient).
func TestASPPushCountsPerSample(t *testing.T) {
	checkLeaks(t)
	cfg := modelConfig(t, sgdMomentum)
	batch := func(context.Context, int64, Share) (*data.Batch, error) { return testBatch(40, 1, 3), nil }
	update := func(share Share) map[string][]float32 {
		j := newJob(t, cfg, []Range{{0, 5}}, []int{2}, 1, ps.ASP)
		j.lastStep = 1
		names := []string{"fc3.weight", "fc5.bias"}
		before := j.blocks(names)
		w := j.elasticWorker(j.transports(), 0, share, batch)
		if _, err := w.Step(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		after := j.blocks(names)
		for name := range after {
			for i := range after[name] {
				after[name][i] -= before[name][i]
			}
		}
		return after
	}
	unit := update(Share{Members: []int{0, 1}, Batches: []int{3, 3}})
	fewer := update(Share{Members: []int{0, 1}, Batches: []int{3, 5}})
	moved := false
	for name, d := range unit {
		for i := range d {
			moved = moved || d[i] != 0
			if want := 0.75 * float64(d[i]); math.Abs(float64(fewer[name][i])-want) > 1e-6+1e-4*math.Abs(want) {
				t.Fatalf("%s[%d]: update %g with batches (3, 5), want 3/4 of %g (weight b_k/mean(b))", name, i, fewer[name][i], d[i])
			}
		}
	}
	if !moved {
		t.Fatal("the step changed no parameter")
	}
	if s := (&Worker{cfg: Config{Mode: ps.ASP}}).aspScale(Share{Members: []int{0, 1}, Batches: []int{3, 5}}, 5); s != 1.25 {
		t.Errorf("replica with 5 of (3, 5): scale %g, want 1.25", s)
	}
}

// blocks pulls the current values of the named dense blocks.
func (j *job) blocks(names []string) map[string][]float32 {
	j.t.Helper()
	c := j.client(0, 0)
	out := map[string][]float32{}
	for _, name := range names {
		v, _, err := c.PullBlock(context.Background(), name, 0)
		if err != nil {
			j.t.Fatal(err)
		}
		out[name] = v
	}
	return out
}
