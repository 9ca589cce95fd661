package nn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// Trainer runs training steps of one model on one backend.
type Trainer struct {
	Backend native.Backend
	Model   *Model
	Opt     *Optimizer
	// Meta is extra checkpoint metadata that Save writes beside its own
	// keys (a caller's run settings, e.g. the batch size heterps train
	// checks on resume); it cannot replace them.
	Meta map[string]string
}

// NewTrainer builds the model of cfg and its optimiser.
func NewTrainer(b native.Backend, cfg *config.Model, seed uint64, totalSteps int64) (*Trainer, error) {
	m, err := Build(b, cfg, seed)
	if err != nil {
		return nil, err
	}
	return &Trainer{Backend: b, Model: m, Opt: NewOptimizer(cfg, totalSteps)}, nil
}

// Step runs forward, loss, backward and one optimiser update on batch and
// returns the batch's mean loss. Unless clipping needs every gradient first,
// each layer's parameters are updated as soon as its backward is done (on
// the side lane, behind its weight gradients, when the backend splits), so
// that the update overlaps the rest of the backward pass; every element's
// update depends on that element only, so the result is the same.
func (t *Trainer) Step(batch *data.Batch) (float64, error) {
	s := &Step{Backend: t.Backend, Batch: batch, Train: true}
	if !t.Opt.updatesEachLayer() || !t.Model.paramsDistinct() {
		loss, err := t.Gradients(s)
		if err != nil {
			return 0, err
		}
		if err := t.Opt.Apply(t.Backend, t.Model.Params()); err != nil {
			return 0, err
		}
		return loss, nil
	}
	loss, dout, err := t.forwardLoss(s)
	if err != nil {
		return 0, err
	}
	t.Opt.Step++
	err = t.Model.backwardLanes(s, dout, false, func(i int, ls *Step) error {
		for _, p := range t.Model.LayerParams(i) {
			if p.Sparse { // the last layers' updates: on this lane, beside the side lane's
				if err := t.Opt.updateNow(ls.Backend, p); err != nil {
					return err
				}
				continue
			}
			if err := ls.offPath(func(be native.Backend) error { return t.Opt.updateNow(be, p) }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return loss, nil
}

// Gradients runs forward, loss and backward, leaving the gradients in the
// parameters without updating them (data-parallel workers push these).
func (t *Trainer) Gradients(s *Step) (float64, error) {
	loss, dout, err := t.forwardLoss(s)
	if err != nil {
		return 0, err
	}
	if err := t.Model.Backward(s, dout); err != nil {
		return 0, err
	}
	return loss, nil
}

// forwardLoss runs forward and the loss, returning the batch's mean loss
// and the gradient of the summed loss with respect to the output.
func (t *Trainer) forwardLoss(s *Step) (float64, Activation, error) {
	if s.Batch == nil || s.Batch.Size == 0 {
		return 0, Activation{}, errors.New("train step: empty batch")
	}
	out, err := t.Model.Forward(s)
	if err != nil {
		return 0, Activation{}, err
	}
	sum, dout, err := t.Model.Loss.Forward(s, out)
	if err != nil {
		return 0, Activation{}, err
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		return 0, Activation{}, fmt.Errorf("train step %d: loss is %v (diverged; lower the learning rate)", t.Opt.Step+1, sum)
	}
	return sum / float64(s.Batch.Size), dout, nil
}

// Metrics summarise a model on held-out data. AUC applies to CTR models
// (and to regression models scored on 0/1 labels), Accuracy to classifiers
// and matching models (share of samples whose own document scores above the
// in-batch negative), Fit to regression models (MSE loss).
type Metrics struct {
	Samples  int
	Loss     float64 // mean
	AUC      float64
	Accuracy float64
	Fit      *Fit // nil unless the loss is MSE
}

// Fit is how well a regression model's outputs match the targets.
type Fit struct {
	MSE float64 // mean squared error
	R2  float64 // 1 - MSE / variance of the targets (see data.Fit)
}

// Evaluate runs the model forward over up to maxSamples samples of src.
func (t *Trainer) Evaluate(ctx context.Context, src data.Source, batchSize, maxSamples int) (Metrics, error) {
	var (
		m       Metrics
		lossSum float64
		scores  []float32
		labels  []float32
		correct int
	)
	batches, err := prefetchUpTo(ctx, src, batchSize, maxSamples)
	if err != nil {
		return m, err
	}
	defer batches.Close() // before the caller closes src
	for {
		batch, err := batches.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, err
		}
		s := &Step{Backend: t.Backend, Batch: batch}
		out, err := t.Model.Forward(s)
		if err != nil {
			return m, err
		}
		sum, _, err := t.Model.Loss.Forward(s, out)
		if err != nil {
			return m, err
		}
		sc, err := t.Model.Loss.Scores(s, out)
		if err != nil {
			return m, err
		}
		lossSum += sum
		m.Samples += batch.Size
		correct += countCorrect(t.Model.Loss, sc, batch)
		scores = append(scores, sc...)
		labels = append(labels, batch.Labels...)
	}
	if m.Samples == 0 {
		return m, errors.New("evaluate: no held-out samples")
	}
	m.Loss = lossSum / float64(m.Samples)
	_, isMSE := t.Model.Loss.(*MSE)
	if !isMSE {
		m.Accuracy = float64(correct) / float64(m.Samples)
	}
	if _, isBCE := t.Model.Loss.(*BCE); isBCE || (isMSE && src.Schema().Task == data.TaskCTR) {
		auc, err := data.AUC(scores, labels)
		if err != nil {
			return m, fmt.Errorf("evaluate: %w", err)
		}
		m.AUC = auc
	}
	if isMSE {
		mse, r2, err := data.Fit(scores, labels)
		if err != nil {
			return m, fmt.Errorf("evaluate: %w", err)
		}
		m.Fit = &Fit{MSE: mse, R2: r2}
	}
	return m, nil
}

// prefetchUpTo reads batches of batchSize from src on another goroutine,
// the last one cut to maxSamples in all.
func prefetchUpTo(ctx context.Context, src data.Source, batchSize, maxSamples int) (*data.Prefetcher[*data.Batch], error) {
	left := maxSamples // the reader goroutine's own
	return data.Prefetch(ctx, 2, 0, func(ctx context.Context) (*data.Batch, error) {
		if left <= 0 {
			return nil, io.EOF
		}
		b, err := src.Next(ctx, min(batchSize, left))
		if err == nil {
			left -= b.Size
		}
		return b, err
	})
}

// countCorrect counts right predictions: the class for classifiers, a
// positive margin for matching, a 0.5-thresholded probability for CTR.
func countCorrect(l Loss, scores []float32, b *data.Batch) int {
	n := 0
	for i, s := range scores {
		switch l.(type) {
		case *SoftmaxXent:
			if int64(s) == b.Classes[i] {
				n++
			}
		case *BCE:
			if (s >= 0.5) == (b.Labels[i] >= 0.5) {
				n++
			}
		default:
			if s > 0 {
				n++
			}
		}
	}
	return n
}
