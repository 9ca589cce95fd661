package config

import (
	"fmt"
	"strings"
	"testing"
)

// boundsModel is a model with every size as a template parameter.
func boundsModel(dense, slots string, vocab, dim, out, classes, negatives string) string {
	return fmt.Sprintf(`version = 1
name = "b"
task = "ctr"
[input]
dense = %s
slots = %s
vocab = %s
[[layer]]
kind = "embedding"
dim = %s
[[layer]]
kind = "concat"
[[layer]]
kind = "fc"
out = %s
[[layer]]
kind = "nce"
classes = %s
negatives = %s
[loss]
kind = "bce"
`, dense, slots, vocab, dim, out, classes, negatives)
}

func TestModelSizeBounds(t *testing.T) {
	const ok = "4"
	cases := []struct {
		name, field, src string
	}{
		{"vocab max int64", "input.vocab", boundsModel(ok, ok, "9223372036854775807", ok, ok, "100", ok)},
		{"vocab just past the cap", "input.vocab", boundsModel(ok, ok, "1099511627777", ok, ok, "100", ok)},
		{"vocab negative", "input.vocab", boundsModel(ok, ok, "-1", ok, ok, "100", ok)},
		{"dense huge", "input.dense", boundsModel("9223372036854775807", ok, "10", ok, ok, "100", ok)},
		{"slots huge", "input.slots", boundsModel(ok, "4611686018427387904", "10", ok, ok, "100", ok)},
		{"dim huge", "layer[0].dim", boundsModel(ok, ok, "10", "9223372036854775807", ok, "100", ok)},
		{"width past the cap", "layer[0]", boundsModel(ok, "65536", "10", "1048576", ok, "100", ok)},
		{"fc out huge", "layer[2].out", boundsModel(ok, ok, "10", ok, "9223372036854775807", "100", ok)},
		{"nce classes huge", "layer[3].classes", boundsModel(ok, ok, "10", ok, ok, "9223372036854775807", ok)},
		{"nce negatives huge", "layer[3].negatives", boundsModel(ok, ok, "10", ok, ok, "4294967296", "4294967295")},
	}
	for _, c := range cases {
		_, err := ParseModel("b.toml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("%s: got %v, want an error about %s", c.name, err, c.field)
		}
	}
}

func TestModelAtTheBoundsParses(t *testing.T) {
	src := boundsModel("1048576", "15", "1099511627776", "1048576", "1048576", "4294967296", "1048576")
	m, err := ParseModel("b.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	s := m.Shapes()
	if s[0].Weights != (1<<40)*(1<<20) || s[3].Weights != (1<<32)*(1<<20+1) {
		t.Fatalf("weights %d and %d", s[0].Weights, s[3].Weights)
	}
}

// FuzzParseModel checks that no model file makes parsing panic and that
// every model it accepts has sizes within the bounds.
func FuzzParseModel(f *testing.F) {
	for _, n := range ZooNames() {
		_, src, err := ReadExample(ExampleModels, n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(boundsModel("9223372036854775807", "-9223372036854775808", "9223372036854775807", "1", "1", "2", "1")))
	f.Fuzz(func(t *testing.T, src []byte) {
		m, err := ParseModel("f.toml", src)
		if err != nil {
			return
		}
		if m.Input.Vocab > MaxVocab || m.Input.Slots > MaxSlots {
			t.Fatalf("accepted input %+v", m.Input)
		}
		for _, s := range m.Shapes() {
			if s.In > MaxWidth || s.Out > MaxWidth || s.Weights < 0 {
				t.Fatalf("accepted layer %+v", s)
			}
		}
	})
}
