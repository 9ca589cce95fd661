package pipeline

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
)

// overlapOn sets Config.OverlapSteps on every worker j builds, after what
// j.configure already does.
func overlapOn(j *job, on bool) {
	before := j.configure
	j.configure = func(cfg *Config, trs map[string]*wire.TCPTransport) {
		if before != nil {
			before(cfg, trs)
		}
		cfg.OverlapSteps = on
	}
}

// trainedWith trains 2 data-parallel replicas with unequal batches for
// steps, their dense parameters on the servers or by allreduce, and
// returns replica 0's losses and every parameter after the job: the
// servers' (or, by allreduce, replica 0's dense ones, which replica 1
// must hold too) and every table row.
func trainedWith(t *testing.T, allreduce, overlap bool, steps int64) ([]float64, map[string][]float32) {
	t.Helper()
	cfg := modelConfig(t, adamAdagrad)
	sizes := []int{3, 5}
	j := newJob(t, cfg, []Range{{0, 5}}, []int{2}, steps, ps.BSP)
	j.lastStep = int(steps)
	if allreduce {
		allreduceEverywhere(j)
	}
	overlapOn(j, overlap)
	ws := j.workers(func(r int) func(context.Context, int64) (*data.Batch, error) {
		return fixedBatches(func(step int64) *data.Batch { return testBatch(20+uint64(r), uint64(step), sizes[r]) })
	})
	losses := j.train(ws, 1, steps)
	params := map[string][]float32{}
	c, ctx := j.client(0, 0), context.Background()
	for _, p := range buildStageModel(t, cfg, j.stages[0]).Params() {
		var v []float32
		var err error
		switch {
		case p.Sparse:
			v, _, err = c.Pull(ctx, p.Name, iota64(testVocab), steps)
		case allreduce:
			reps := denseOf(t, ws)[0]
			v = reps[0][p.Name]
			if !slices.Equal(v, reps[1][p.Name]) {
				t.Fatalf("%s: the replicas differ", p.Name)
			}
		default:
			v, _, err = c.PullBlock(ctx, p.Name, steps)
		}
		if err != nil {
			t.Fatal(err)
		}
		params[p.Name] = v
	}
	return losses[0], params
}

// Overlapping steps changes when a step returns, not what it computes:
// every layer still runs on the parameters after the previous step's
// update, so the losses and the parameters after the job are the same
// bits with and without it, the dense parameters on the servers or
// reduced among the replicas.
func TestOverlappedStepsTrainTheSameBits(t *testing.T) {
	checkLeaks(t)
	const steps = 5
	for _, allreduce := range []bool{false, true} {
		lossesOff, paramsOff := trainedWith(t, allreduce, false, steps)
		lossesOn, paramsOn := trainedWith(t, allreduce, true, steps)
		if !slices.Equal(lossesOn, lossesOff) {
			t.Fatalf("allreduce %v: losses %v overlapped, %v not", allreduce, lossesOn, lossesOff)
		}
		if !maps.EqualFunc(paramsOn, paramsOff, slices.Equal) {
			t.Fatalf("allreduce %v: the parameters after %d overlapped steps differ from those after plain ones", allreduce, steps)
		}
	}
}

// twoReducing is a 2-replica allreduce job of steps steps whose workers
// overlap their steps or not, with their transports.
func twoReducing(t *testing.T, overlap bool, steps int64, timeout time.Duration) ([]*Worker, map[string]*wire.TCPTransport) {
	t.Helper()
	j := newJob(t, modelConfig(t, sgdMomentum), []Range{{0, 5}}, []int{2}, steps, ps.BSP)
	j.lastStep = int(steps)
	allreduceEverywhere(j)
	overlapOn(j, overlap)
	trs := j.transports()
	var ws []*Worker
	for r := range 2 {
		ws = append(ws, j.worker(trs, 0, r, fixedBatches(func(step int64) *data.Batch {
			return testBatch(30+uint64(r), uint64(step), 4)
		}), timeout))
	}
	return ws, trs
}

// An overlapped step returns once its compute is done, its reductions
// left to finish: replica 0 ends step 1 while replica 1 has not begun it
// (without overlap the same call waits for replica 1's gradients and runs
// out of time). Its step 2 then waits in its forward for the layers
// still being reduced, Drain waits for them too, and once replica 1 has
// run step 1 everything goes through.
func TestAnOverlappedStepReturnsBeforeItsReductions(t *testing.T) {
	checkLeaks(t)
	plain, _ := twoReducing(t, false, 3, time.Second)
	if _, err := plain[0].Step(context.Background(), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a plain step 1 without replica 1: %v, want it to time out waiting", err)
	}

	ws, _ := twoReducing(t, true, 3, 30*time.Second)
	if _, err := ws[0].Step(context.Background(), 1); err != nil {
		t.Fatalf("replica 0's overlapped step 1 without replica 1: %v", err)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ws[0].Drain(short); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "step 1") {
		t.Fatalf("Drain while step 1's reductions wait for replica 1: %v, want a timeout naming step 1", err)
	}
	step2 := make(chan error, 1)
	go func() {
		_, err := ws[0].Step(context.Background(), 2)
		step2 <- err
	}()
	select {
	case err := <-step2:
		t.Fatalf("replica 0's step 2 ended (%v) before replica 1 ran step 1", err)
	case <-time.After(200 * time.Millisecond):
	}
	for step := int64(1); step <= 2; step++ {
		if _, err := ws[1].Step(context.Background(), step); err != nil {
			t.Fatalf("replica 1 step %d: %v", step, err)
		}
	}
	if err := <-step2; err != nil {
		t.Fatalf("replica 0's step 2: %v", err)
	}
	for r, w := range ws {
		if err := w.Drain(context.Background()); err != nil {
			t.Fatalf("replica %d: Drain after step 2: %v", r, err)
		}
	}
	reps := denseOf(t, [][]*Worker{ws})[0]
	if !maps.EqualFunc(reps[0], reps[1], slices.Equal) {
		t.Fatal("the replicas' dense parameters differ after 2 overlapped steps")
	}
}

// A tail that fails fails the step after it, which names, once, the step
// the failed reduction belonged to: replica 1 goes away while replica 0's
// step 1 waits for its gradients.
func TestAFailedTailFailsTheNextStep(t *testing.T) {
	checkLeaks(t)
	ws, trs := twoReducing(t, true, 3, 20*time.Second)
	if _, err := ws[0].Step(context.Background(), 1); err != nil {
		t.Fatalf("replica 0's overlapped step 1: %v", err)
	}
	trs[nodeID(0, 1)].Close()
	_, err := ws[0].Step(context.Background(), 2)
	if err == nil || !strings.Contains(err.Error(), "step 2: ") || strings.Count(err.Error(), "step 1, still synchronising: ") != 1 {
		t.Fatalf("step 2 after replica 1 went away: %v, want the failure of step 1's reductions", err)
	}
	if err := ws[0].Drain(context.Background()); err != nil {
		t.Fatalf("Drain after the failed step: %v, want nil (the failure was reported)", err)
	}
}
