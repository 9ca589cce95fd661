package nn

import (
	"context"
	"math"
	"testing"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// trainLinreg trains the zoo linreg model at learning rate lr for steps
// batches of 512 of regress:1's training split and evaluates it on 20,000
// held-out samples; it returns the metrics and the held-out generator.
func trainLinreg(t *testing.T, lr float64, steps int) (Metrics, *data.Regress) {
	t.Helper()
	cfg := loadZoo(t, "linreg")
	cfg.Optimizer.LR = lr
	tr, err := NewTrainer(native.MustCPU(), cfg, 1, int64(steps))
	if err != nil {
		t.Fatal(err)
	}
	trainSteps(t, tr, openData(t, "regress:1", data.Options{Split: data.SplitTrain}), 512, steps)
	eval := openData(t, "regress:1", data.Options{Split: data.SplitEval})
	m, err := tr.Evaluate(context.Background(), eval, 512, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if m.Fit == nil {
		t.Fatal("an MSE model's evaluation has no Fit")
	}
	return m, eval.(*data.Regress)
}

// nearOptimum reports how a regression fit falls short of the generator's
// optimum: "" when its MSE is within 10% of σ² and its R² within 0.02 of
// the optimal R².
func nearOptimum(f *Fit, g *data.Regress) string {
	switch {
	case f.MSE > 1.1*g.OptimalMSE():
		return "MSE above 1.1 x the optimal MSE"
	case math.Abs(f.R2-g.OptimalR2()) > 0.02:
		return "R² more than 0.02 from the optimal R²"
	}
	return ""
}

func TestLinregReachesTheRegressOptimum(t *testing.T) {
	m, g := trainLinreg(t, 0.01, 300)
	t.Logf("held-out MSE %.4f (optimal %.4f), R² %.4f (optimal %.4f), loss %.4f on %d samples",
		m.Fit.MSE, g.OptimalMSE(), m.Fit.R2, g.OptimalR2(), m.Loss, m.Samples)
	if why := nearOptimum(m.Fit, g); why != "" {
		t.Fatalf("after 300 steps: %s: MSE %.4f vs %.4f, R² %.4f vs %.4f", why, m.Fit.MSE, g.OptimalMSE(), m.Fit.R2, g.OptimalR2())
	}
	if math.Abs(m.Fit.MSE-m.Loss) > 1e-6*m.Loss || m.Accuracy != 0 || m.AUC != 0 {
		t.Errorf("MSE %.6f, loss %.6f, accuracy %g, AUC %g; want MSE = loss and no accuracy or AUC on regression targets",
			m.Fit.MSE, m.Loss, m.Accuracy, m.AUC)
	}
}

// TestLinregAtLearningRateZeroMissesTheOptimum: the criterion above is not
// met by the untrained model.
func TestLinregAtLearningRateZeroMissesTheOptimum(t *testing.T) {
	m, g := trainLinreg(t, 0, 300)
	if why := nearOptimum(m.Fit, g); why == "" {
		t.Fatalf("an untrained linreg is near the optimum: MSE %.4f, R² %.4f", m.Fit.MSE, m.Fit.R2)
	}
}

// TestLinregOnClickLabelsReportsFitAndAUC: linreg on 0/1 labels is a
// linear-probability model, scored by both its fit and its ranking.
func TestLinregOnClickLabelsReportsFitAndAUC(t *testing.T) {
	cfg := loadZoo(t, "linreg")
	tr, err := NewTrainer(native.MustCPU(), cfg, 1, 200)
	if err != nil {
		t.Fatal(err)
	}
	opts := data.Options{Split: data.SplitTrain}
	trainSteps(t, tr, openData(t, "synthetic:1", opts), 256, 200)
	opts.Split = data.SplitEval
	m, err := tr.Evaluate(context.Background(), openData(t, "synthetic:1", opts), 512, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if m.Fit == nil || m.AUC <= 0.5 || m.Accuracy != 0 {
		t.Fatalf("fit %+v, AUC %g, accuracy %g; want a fit and an AUC above chance", m.Fit, m.AUC, m.Accuracy)
	}
}
