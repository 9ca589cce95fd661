package nn

import (
	"context"
	"errors"
	"testing"

	"github.com/heterps/heterps/daemon/data"
	"go.uber.org/goleak"
)

// TestEvaluatePrefetchesTheSameBatches: Evaluate reads ahead on another
// goroutine; its loss is that of a plain loop over the same batches, the
// last one cut to the sample limit.
func TestEvaluatePrefetchesTheSameBatches(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := laneModel(t)
	tr, err := NewTrainer(cpuThreads(t, 1), cfg, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	opts := data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitEval}
	m, err := tr.Evaluate(context.Background(), openData(t, "synthetic:5", opts), 64, 300)
	if err != nil {
		t.Fatal(err)
	}
	src := openData(t, "synthetic:5", opts)
	var sum float64
	samples := 0
	for samples < 300 {
		b, err := src.Next(context.Background(), min(64, 300-samples))
		if err != nil {
			t.Fatal(err)
		}
		s := &Step{Backend: tr.Backend, Batch: b}
		out, err := tr.Model.Forward(s)
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := tr.Model.Loss.Forward(s, out)
		if err != nil {
			t.Fatal(err)
		}
		sum += l
		samples += b.Size
	}
	if m.Samples != 300 || m.Loss != sum/300 {
		t.Fatalf("Evaluate: %d samples, loss %v; the plain loop: 300, %v", m.Samples, m.Loss, sum/300)
	}
}

// failingSource gives good batches of a generator, then an error.
type failingSource struct {
	data.Source
	left int
}

var errRead = errors.New("read error at line 40")

func (f *failingSource) Next(ctx context.Context, size int) (*data.Batch, error) {
	if f.left == 0 {
		return nil, errRead
	}
	f.left--
	return f.Source.Next(ctx, size)
}

func TestEvaluateReturnsTheSourcesErrorAndStopsReading(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := laneModel(t)
	tr, err := NewTrainer(cpuThreads(t, 1), cfg, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	src := &failingSource{Source: openData(t, "synthetic:5", data.Options{Vocab: cfg.Input.Vocab}), left: 2}
	if _, err := tr.Evaluate(context.Background(), src, 32, 1000); !errors.Is(err, errRead) {
		t.Fatalf("Evaluate: %v, want the source's error", err)
	}
}
