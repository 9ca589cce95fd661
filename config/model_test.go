package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestZooModelsParse(t *testing.T) {
	names := ZooNames()
	for _, want := range []string{"ctrdnn", "ctrdnn-8", "ctrdnn-12", "ctrdnn-16", "ctrdnn-20", "matchnet", "2emb", "nce", "mlp-digits", "linreg", "avazu"} {
		if !contains(names, want) {
			t.Errorf("zoo lacks %s", want)
		}
	}
	for _, n := range names {
		m, err := LoadModel(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if m.Name != n {
			t.Errorf("%s: file names itself %q", n, m.Name)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestCtrdnnShapes(t *testing.T) {
	m, err := LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	s := m.Shapes()
	if len(s) != 7 {
		t.Fatalf("%d layers", len(s))
	}
	emb, fc1, logit := s[0], s[2], s[6]
	if emb.Out != 26*9 || emb.Weights != 1000001*9 {
		t.Errorf("embedding %+v", emb)
	}
	if fc1.In != 247 || fc1.Out != 512 || fc1.Weights != 247*512+512 {
		t.Errorf("fc1 %+v", fc1)
	}
	if logit.Out != 1 {
		t.Errorf("logit %+v", logit)
	}
}

func TestCtrdnnNHasNLayers(t *testing.T) {
	for _, n := range []int{8, 12, 16, 20} {
		m, err := LoadModel(fmt.Sprintf("ctrdnn-%d", n))
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Layers) != n {
			t.Errorf("ctrdnn-%d has %d layers", n, len(m.Layers))
		}
	}
}

func TestModelErrorsNameLineAndField(t *testing.T) {
	base := "version = 1\nname = \"m\"\ntask = \"ctr\"\n[input]\ndense = 4\nslots = 2\nvocab = 10\n"
	cases := []struct {
		name, src, where, msg string
	}{
		{"unknown layer", base + "[[layer]]\nkind = \"conv\"\n[loss]\nkind = \"bce\"\n", "m.toml:9:1: layer[0].kind", "unknown layer kind \"conv\""},
		{"width mismatch", base + "[[layer]]\nkind = \"dense\"\n[[layer]]\nkind = \"fc\"\nin = 5\nout = 1\n[loss]\nkind = \"bce\"\n", "m.toml:12:1: layer[1].in", "produces 4"},
		{"bad loss", base + "[[layer]]\nkind = \"dense\"\n[loss]\nkind = \"l7\"\n", "m.toml:11:1: loss.kind", "unknown loss"},
		{"no loss", base + "[[layer]]\nkind = \"dense\"\n", "m.toml: loss.kind", "missing: a model needs [loss] kind = one of bce"},
		{"unknown key", base + "[[layer]]\nkind = \"dense\"\nwidth = 3\n", "m.toml:10:1", "unknown key"},
		{"bad slots", base + "[[layer]]\nkind = \"embedding\"\ndim = 4\nslots = [1, 5]\n[loss]\nkind = \"bce\"\n", "layer[0].slots", "outside the 2 input slots"},
		{"bad lr", base + "[[layer]]\nkind = \"dense\"\n[loss]\nkind = \"bce\"\n[optimizer]\nlr = -1.0\n", "optimizer.lr", "must be > 0"},
	}
	for _, c := range cases {
		_, err := ParseModel("m.toml", []byte(c.src))
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%s: want *Error, got %v", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.where) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v (want %q and %q)", c.name, err, c.where, c.msg)
		}
	}
}

func TestLoadModelUnknownName(t *testing.T) {
	_, err := LoadModel("resnet")
	if err == nil || !strings.Contains(err.Error(), "ctrdnn") {
		t.Fatalf("want error listing the zoo, got %v", err)
	}
}

// Each field of a model's [optimizer] out of range is refused at its line,
// naming the field: the optimiser's settings reach the kernels as they are.
func TestOptimizerErrorsNameTheField(t *testing.T) {
	base := "version = 1\nname = \"m\"\ntask = \"ctr\"\n[input]\ndense = 4\nslots = 2\nvocab = 10\n[[layer]]\nkind = \"dense\"\n[loss]\nkind = \"bce\"\n[optimizer]\n"
	for _, c := range []struct{ set, field, msg string }{
		{"kind = \"lamb\"", "optimizer.kind", `unknown optimiser "lamb" (want sgd, adagrad or adam)`},
		{"lr = 0.0", "optimizer.lr", "must be > 0, got 0"},
		{"kind = \"sgd\"\nmomentum = 1.0", "optimizer.momentum", "must be in [0, 1), got 1"},
		{"beta1 = -0.1", "optimizer.beta1", "betas must be in [0, 1), got -0.1"},
		{"beta2 = 1.0", "optimizer.beta1", "betas must be in [0, 1), got 0.9 and 1"},
		{"eps = 0.0", "optimizer.eps", "must be > 0, got 0"},
		{"weight_decay = -1.0", "optimizer.weight_decay", "must be >= 0, got -1"},
		{"schedule = \"step\"", "optimizer.schedule", `unknown schedule "step" (want constant, warmup or cosine)`},
		{"schedule = \"warmup\"\nwarmup_steps = -5", "optimizer.warmup_steps", "must be >= 0, got -5"},
		{"clip_norm = -1.0", "optimizer.clip_norm", "must be >= 0, got -1"},
	} {
		_, err := ParseModel("m.toml", []byte(base+c.set+"\n"))
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "m.toml:") || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want an error at a line of m.toml naming %s: %q", c.set, err, c.field, c.msg)
		}
	}
	if _, err := ParseModel("m.toml", []byte(base+"kind = \"adam\"\nlr = 0.001\n")); err != nil {
		t.Errorf("a valid optimizer: %v", err)
	}
	// A setting given as 0 is the file's, not a gap for the default: Adam
	// with beta1 = 0 keeps no first moment (lr = 0 and eps = 0 are refused
	// above rather than turned into 0.001 and 1e-8).
	m, err := ParseModel("m.toml", []byte(base+"beta1 = 0.0\n[sparse_optimizer]\nbeta2 = 0.0\n"))
	if err != nil || m.Optimizer.Beta1 != 0 || m.Optimizer.Beta2 != 0.999 || m.SparseOptimizer.Beta2 != 0 || m.SparseOptimizer.Beta1 != 0.9 {
		t.Errorf("beta1 = 0 in [optimizer], beta2 = 0 in [sparse_optimizer]: %v, %+v and %+v", err, m.Optimizer, m.SparseOptimizer)
	}
	if _, err := ParseModel("m.toml", []byte(base+"[sparse_optimizer]\nlr = 0.0\n")); err == nil || !strings.Contains(err.Error(), "sparse_optimizer.lr") {
		t.Errorf("lr = 0 in [sparse_optimizer]: %v, want refused naming it", err)
	}
}
