package config

import "testing"

func TestMatchnetAndNCEOutputShapes(t *testing.T) {
	m, err := LoadModel("matchnet")
	if err != nil {
		t.Fatal(err)
	}
	s := m.Shapes()
	join := s[len(s)-1]
	// Two scores per sample: the own document and the in-batch negative.
	if join.Kind != "cosine" || join.In != 32 || join.Out != 2 || join.Weights != 0 {
		t.Errorf("matchnet join %+v, want cosine 32 -> 2 without weights", join)
	}
	m, err = LoadModel("nce")
	if err != nil {
		t.Fatal(err)
	}
	out := m.Shapes()[1]
	if out.Kind != "nce" || out.In != 128 || out.Out != 1+8 || out.Weights != 100000*129 {
		t.Errorf("nce output layer %+v, want 128 -> 9 logits over a 100000 x 129 table", out)
	}
}
