package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
)

// stopBound is how long a cancelled step or a Close may take; far below
// the job's step and PS timeouts (30 s, 20 s), which would end a hang too.
const stopBound = 10 * time.Second

// TestCancelledStepReturnsWhenAPeerReplicaDied: of two data-parallel
// replicas, replica 1 dies after step 1, so replica 0's pulls ahead for
// step 3 wait on a BSP barrier that never fills. Cancelling replica 0's
// step 3 returns at once, Close ends the pulls, and no goroutine is left.
func TestCancelledStepReturnsWhenAPeerReplicaDied(t *testing.T) {
	checkLeaks(t)
	cfg := modelConfig(t, adamAdagrad)
	j := newJob(t, cfg, []Range{{0, 5}}, []int{2}, 10, ps.BSP)
	ws := j.workers(func(r int) func(context.Context, int64) (*data.Batch, error) {
		return fixedBatches(func(step int64) *data.Batch { return testBatch(uint64(r), uint64(step), 4) })
	})
	j.train(ws, 1, 1)
	ws[0][1].Close() // replica 1 dies
	live := ws[0][0]
	if _, err := live.Step(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := live.Step(ctx, 3)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("step 3: %v, want the cancellation", err)
		}
	case <-time.After(stopBound):
		t.Fatalf("step 3 still runs %v after its context was cancelled", stopBound)
	}
	closed := make(chan struct{})
	go func() {
		live.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(stopBound):
		t.Fatalf("Close still waits %v later", stopBound)
	}
}
