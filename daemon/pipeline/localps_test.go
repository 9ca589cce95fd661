package pipeline

import (
	"context"
	"slices"
	"testing"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// One stage on a shard in its own process (the client's Local path: no
// encoding, the gradients used in place, the dense values pulled ahead
// into reused buffers) trains bit for bit as single-process training, and
// the pulls ahead alternate between two sets of buffers instead of
// allocating a set a step.
func TestLocalShardStageEqualsSingleProcessAndReusesBuffers(t *testing.T) {
	checkLeaks(t)
	const steps, size = 6, 6
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), size) }
	w := localPSWorker(t, cfg, native.MustCPU(), steps, fixedBatches(batch))
	_, refLosses := reference(t, cfg, steps, batch)

	var losses []float64
	spare := map[int64]*float32{} // after each step, the buffer free for dense parameter 0
	for step := int64(1); step <= steps; step++ {
		res, err := w.Step(context.Background(), step)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, res.Loss)
		if len(w.spare) > 0 {
			spare[step] = unsafeData(w.spare[0])
		}
	}
	if !slices.Equal(losses, refLosses) {
		t.Fatalf("losses %v, single-process %v", losses, refLosses)
	}
	for step := int64(2); step+2 <= steps; step++ {
		if spare[step] == nil || spare[step] != spare[step+2] {
			t.Fatalf("dense buffers after steps %d and %d: %p and %p, want the same reused buffer", step, step+2, spare[step], spare[step+2])
		}
	}
}

func unsafeData(s []float32) *float32 {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}
