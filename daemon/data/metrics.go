package data

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// AUC is the area under the ROC curve of scores against 0/1 labels: the
// probability that a random positive scores above a random negative, ties
// counting one half. It sorts once, O(n log n). It fails when the lengths
// differ, a label is not 0 or 1, a score is NaN, or one class is absent.
func AUC(scores, labels []float32) (float64, error) {
	if len(scores) != len(labels) {
		return 0, fmt.Errorf("data: AUC of %d scores and %d labels", len(scores), len(labels))
	}
	type pair struct {
		score    float32
		positive bool
	}
	pairs := make([]pair, len(scores))
	for i, s := range scores {
		if math.IsNaN(float64(s)) {
			return 0, fmt.Errorf("data: AUC: score %d is NaN", i)
		}
		if y := labels[i]; y != 0 && y != 1 {
			return 0, fmt.Errorf("data: AUC: label %d is %g, want 0 or 1", i, y)
		}
		pairs[i] = pair{s, labels[i] == 1}
	}
	slices.SortFunc(pairs, func(a, b pair) int { return cmp.Compare(a.score, b.score) })

	// Walk groups of tied scores upwards; each positive beats every negative
	// below its group and ties with the negatives inside it. twice counts in
	// halves so that the sum stays an exact integer.
	var twice, negBelow, pos, neg int64
	for start := 0; start < len(pairs); {
		end := start
		var p, n int64
		for ; end < len(pairs) && pairs[end].score == pairs[start].score; end++ {
			if pairs[end].positive {
				p++
			} else {
				n++
			}
		}
		twice += 2*p*negBelow + p*n
		negBelow += n
		pos += p
		neg += n
		start = end
	}
	if pos == 0 || neg == 0 {
		return 0, fmt.Errorf("data: AUC undefined with %d positives and %d negatives", pos, neg)
	}
	return float64(twice) / (2 * float64(pos) * float64(neg)), nil
}

// Accuracy is the share of samples whose highest logit (the first one, on a
// tie) is at their class. logits is len(classes) x numClasses, row-major.
func Accuracy(logits []float32, numClasses int, classes []int64) (float64, error) {
	if numClasses < 1 || len(logits) != len(classes)*numClasses {
		return 0, fmt.Errorf("data: accuracy of %d logits for %d samples of %d classes", len(logits), len(classes), numClasses)
	}
	if len(classes) == 0 {
		return 0, fmt.Errorf("data: accuracy of no samples")
	}
	right := 0
	for i, c := range classes {
		row := logits[i*numClasses : (i+1)*numClasses]
		best := 0
		for k, v := range row {
			if v > row[best] {
				best = k
			}
		}
		if int64(best) == c {
			right++
		}
	}
	return float64(right) / float64(len(classes)), nil
}

// Fit measures predictions against real-valued targets: the mean squared
// error and R² = 1 - MSE / (variance of the targets), the share of the
// targets' variance the predictions explain (negative when they do worse
// than predicting the targets' mean). It fails when the lengths differ,
// there are no samples, a value is not finite, or the targets are constant.
func Fit(preds, targets []float32) (mse, r2 float64, err error) {
	if len(preds) != len(targets) || len(preds) == 0 {
		return 0, 0, fmt.Errorf("data: fit of %d predictions to %d targets", len(preds), len(targets))
	}
	mean := 0.0
	for i, y := range targets {
		if p := float64(preds[i]); math.IsNaN(p) || math.IsInf(p, 0) || math.IsNaN(float64(y)) || math.IsInf(float64(y), 0) {
			return 0, 0, fmt.Errorf("data: fit: sample %d predicts %g for target %g", i, preds[i], y)
		}
		mean += float64(y)
	}
	mean /= float64(len(targets))
	var sse, sst float64
	for i, y := range targets {
		e, d := float64(preds[i])-float64(y), float64(y)-mean
		sse += e * e
		sst += d * d
	}
	if sst == 0 {
		return 0, 0, fmt.Errorf("data: fit: the %d targets are all %g, R² is undefined", len(targets), mean)
	}
	n := float64(len(targets))
	return sse / n, 1 - sse/sst, nil
}
