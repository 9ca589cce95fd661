package ps

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// pushData is what replica r pushes to shard i at step: distinct ids of
// that shard, their gradient and the replica's batch size. It depends on
// (r, step, i) only, so any interleaving of pushes can be replayed.
func pushData(r int, step int64, i, nshards int) ([]int64, []float32, float64) {
	rng := rand.New(rand.NewPCG(uint64(r)<<32|uint64(i), uint64(step)))
	ids := idsOn(i, nshards, 30)
	rng.Shuffle(len(ids), func(a, b int) { ids[a], ids[b] = ids[b], ids[a] })
	ids = ids[:1+rng.IntN(len(ids))]
	return ids, randFloats(rng, len(ids)*testDim), float64(1 + (r+int(step))%3)
}

func blockData(r int, step int64) []float32 {
	return randFloats(rand.New(rand.NewPCG(uint64(r), uint64(step)+1000)), testLen)
}

// runReplica plays replica r for steps BSP steps: pull what the step needs
// (waiting for the previous step), then push to every shard.
func runReplica(j *job, r int, steps int64) error {
	ctx := context.Background()
	for step := int64(1); step <= steps; step++ {
		for i, s := range j.shards {
			ids, g, w := pushData(r, step, i, len(j.shards))
			if _, _, err := s.PullRows(ctx, testTable, ids, step-1); err != nil {
				return err
			}
			if _, err := s.PushRows(id(r, step), testTable, w, ids, g); err != nil {
				return err
			}
		}
		if _, _, err := j.shards[0].PullBlock(ctx, testBlock, step-1); err != nil {
			return err
		}
		_, _, w := pushData(r, step, 0, len(j.shards))
		if _, err := j.shards[0].PushBlock(id(r, step), testBlock, w, blockData(r, step)); err != nil {
			return err
		}
	}
	return nil
}

// readUntil pulls random rows and the block until stop closes.
func readUntil(j *job, seed uint64, stop <-chan struct{}) error {
	rng := rand.New(rand.NewPCG(seed, 0))
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		i := rng.IntN(len(j.shards))
		ids := idsOn(i, len(j.shards), 40)[rng.IntN(20):]
		if _, _, err := j.shards[i].PullRows(context.Background(), testTable, ids, 0); err != nil {
			return err
		}
		if _, _, err := j.shards[0].PullBlock(context.Background(), testBlock, 0); err != nil {
			return err
		}
	}
}

// TestConcurrentPushPull runs four replicas and four readers on their own
// goroutines against two BSP shards, then replays the same pushes one at
// a time on a second job: BSP's result must not depend on arrival order.
func TestConcurrentPushPull(t *testing.T) {
	const nshards, replicas, readers, steps = 2, 4, 4, 12
	conc := newJob(t, BSP, nshards, replicas)
	var writers, others sync.WaitGroup
	errs := make(chan error, replicas+readers)
	stop := make(chan struct{})
	for r := range replicas {
		writers.Go(func() {
			if err := runReplica(conc, r, steps); err != nil {
				errs <- fmt.Errorf("replica %d: %w", r, err)
			}
		})
	}
	for k := range readers {
		others.Go(func() {
			if err := readUntil(conc, uint64(k), stop); err != nil {
				errs <- fmt.Errorf("reader %d: %w", k, err)
			}
		})
	}
	writers.Wait()
	close(stop)
	others.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	seq := newJob(t, BSP, nshards, replicas)
	for step := int64(1); step <= steps; step++ {
		for r := range replicas {
			for i, s := range seq.shards {
				ids, g, w := pushData(r, step, i, nshards)
				mustPushRows(t, s, id(r, step), w, ids, g)
			}
			_, _, w := pushData(r, step, 0, nshards)
			mustPushBlock(t, seq.shards[0], id(r, step), w, blockData(r, step))
		}
	}
	for _, s := range conc.shards {
		if v, _ := s.Version(testTable); v != steps {
			t.Errorf("shard %d at version %d, want %d", s.cfg.Shard, v, steps)
		}
	}
	assertSameState(t, "concurrent against sequential", conc.state(t), seq.state(t))
}
