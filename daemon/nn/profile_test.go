package nn

import (
	"context"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// queuedBackend stands in for a backend that queues its work (CUDA): its
// queued work takes delay to finish, which only Sync waits for.
type queuedBackend struct {
	native.Backend
	delay time.Duration
	syncs int
}

func (q *queuedBackend) Sync() error {
	q.syncs++
	time.Sleep(q.delay)
	return nil
}

// TestProfileLayersWaitsForQueuedWork: on a backend that queues its work,
// each layer's time includes waiting for that work, not only the launch.
func TestProfileLayersWaitsForQueuedWork(t *testing.T) {
	cfg := loadZoo(t, "linreg")
	q := &queuedBackend{Backend: native.MustCPU(), delay: 3 * time.Millisecond}
	m, err := Build(q, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	src := openData(t, "regress:1", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	b, err := src.Next(context.Background(), 16)
	if err != nil {
		t.Fatal(err)
	}
	times, err := m.ProfileLayers(&Step{Backend: q, Batch: b, Train: true}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * 2 * 2 * len(times); q.syncs != want { // 2 reps x (forward, backward) x (start, stop)
		t.Errorf("%d syncs, want %d", q.syncs, want)
	}
	for _, lt := range times {
		if lt.Forward < q.delay || lt.Backward < q.delay {
			t.Errorf("%s: forward %v, backward %v: the queued work (%v) was not waited for", lt.Name, lt.Forward, lt.Backward, q.delay)
		}
	}
}
