package nn

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

func loadZoo(t *testing.T, name string) *config.Model {
	t.Helper()
	m, err := config.LoadModel(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func openData(t *testing.T, spec string, opts data.Options) data.Source {
	t.Helper()
	src, err := data.Open(spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// trainSteps trains tr for steps batches of size from src.
func trainSteps(t *testing.T, tr *Trainer, src data.Source, size, steps int) {
	t.Helper()
	for range steps {
		b, err := src.Next(context.Background(), size)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Step(b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCTRDNNApproachesBayesOptimalAUC(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for about 15 s; skipped with -short")
	}
	cfg := loadZoo(t, "ctrdnn")
	tr, err := NewTrainer(native.MustCPU(), cfg, 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	opts := data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain}
	trainSteps(t, tr, openData(t, "synthetic:1", opts), 512, 1000)
	opts.Split = data.SplitEval
	eval := openData(t, "synthetic:1", opts)
	m, err := tr.Evaluate(context.Background(), eval, 512, 20000)
	if err != nil {
		t.Fatal(err)
	}
	bayes, err := eval.(*data.Synthetic).BayesAUC(m.Samples)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("AUC %.4f, Bayes-optimal %.4f (%.3f)", m.AUC, bayes, m.AUC/bayes)
	if m.AUC < 0.97*bayes {
		t.Fatalf("AUC %.4f is below 0.97 x Bayes-optimal %.4f", m.AUC, bayes)
	}
}

func digitsPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"../../../shared/data/digits.csv.gz", "../data/testdata/digits.csv.gz"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("digits.csv.gz not found")
	return ""
}

func TestMLPDigitsHeldOutAccuracy(t *testing.T) {
	cfg := loadZoo(t, "mlp-digits")
	tr, err := NewTrainer(native.MustCPU(), cfg, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	spec := "digits:" + digitsPath(t)
	for range 40 { // epochs over the ~1600 training digits
		src := openData(t, spec, data.Options{Split: data.SplitTrain})
		for {
			b, err := src.Next(context.Background(), 64)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Step(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	m, err := tr.Evaluate(context.Background(), openData(t, spec, data.Options{Split: data.SplitEval}), 64, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held-out accuracy %.4f on %d digits", m.Accuracy, m.Samples)
	if m.Samples < 100 || m.Accuracy < 0.90 {
		t.Fatalf("held-out accuracy %.4f on %d digits, want >= 0.90 on >= 100", m.Accuracy, m.Samples)
	}
}

const resumeModel = `
version = 1
name = "resume"
task = "ctr"
[input]
dense = 13
slots = 26
vocab = 100000
[[layer]]
kind = "embedding"
dim = 4
[[layer]]
kind = "concat"
[[layer]]
kind = "fc"
out = 16
act = "relu"
[[layer]]
kind = "fc"
out = 1
[loss]
kind = "bce"
[optimizer]
kind = "adam"
lr = 0.01
[sparse_optimizer]
kind = "adagrad"
lr = 0.05
`

// paramsOf copies every parameter and optimiser state of tr.
func paramsOf(tr *Trainer) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range tr.Model.Params() {
		for i, buf := range append([]native.Buffer{p.Value}, p.State...) {
			h, _ := native.Host(buf)
			out[stateName(p.Name, i)] = append([]float32(nil), h...)
		}
	}
	return out
}

func TestSaveResumeMatchesUninterruptedRun(t *testing.T) {
	cfg := mustModel(t, resumeModel)
	opts := data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain}
	b := native.MustCPU()
	straight, _ := NewTrainer(b, cfg, 9, 0)
	trainSteps(t, straight, openData(t, "synthetic:4", opts), 64, 30)

	path := filepath.Join(t.TempDir(), "resume.safetensors")
	first, _ := NewTrainer(b, cfg, 9, 0)
	src := openData(t, "synthetic:4", opts)
	trainSteps(t, first, src, 64, 12)
	if err := first.Save(path); err != nil {
		t.Fatal(err)
	}
	resumed, _ := NewTrainer(b, cfg, 77, 0) // another seed: everything must come from the file
	if err := resumed.Load(path); err != nil {
		t.Fatal(err)
	}
	if resumed.Opt.Step != 12 {
		t.Fatalf("resumed at step %d, want 12", resumed.Opt.Step)
	}
	trainSteps(t, resumed, src, 64, 18)

	want, got := paramsOf(straight), paramsOf(resumed)
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Fatalf("%s: %d values, want %d", name, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("%s[%d] = %v after resume, %v uninterrupted", name, i, g[i], w[i])
			}
		}
	}
}

func TestLoadRefusesOtherModelAndCorruptFiles(t *testing.T) {
	b := native.MustCPU()
	dir := t.TempDir()
	cfg := mustModel(t, resumeModel)
	tr, _ := NewTrainer(b, cfg, 1, 0)
	good := filepath.Join(dir, "good.safetensors")
	if err := tr.Save(good); err != nil {
		t.Fatal(err)
	}
	other, _ := NewTrainer(b, mustModel(t, strings.Replace(resumeModel, `name = "resume"`, `name = "other"`, 1)), 1, 0)
	err := other.Load(good)
	var mismatch *ckpt.ModelMismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "is of model resume, not other") {
		t.Fatalf("loading another model's checkpoint: %v", err)
	}

	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.safetensors")
	if err := os.WriteFile(truncated, raw[:len(raw)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	before := paramsOf(tr)
	if err := tr.Load(truncated); err == nil || !strings.Contains(err.Error(), "truncated.safetensors") {
		t.Fatalf("truncated checkpoint: %v", err)
	}
	for name, w := range before {
		if g := paramsOf(tr)[name]; len(g) != len(w) || (len(w) > 0 && g[0] != w[0]) {
			t.Fatalf("%s changed by a failed load", name)
		}
	}
}
