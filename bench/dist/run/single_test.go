package main

import (
	"testing"

	"github.com/heterps/heterps/config"
)

const tinyCTR = `version = 1
name = "tinyctr"
task = "ctr"
[input]
dense = 13
slots = 26
vocab = 100001
[[layer]]
name = "emb"
kind = "embedding"
dim = 4
[[layer]]
name = "concat"
kind = "concat"
[[layer]]
name = "fc1"
kind = "fc"
in = 117
out = 8
act = "relu"
[[layer]]
name = "logit"
kind = "fc"
in = 8
out = 1
[loss]
kind = "bce"
[optimizer]
kind = "adam"
lr = 0.01
`

// TestRecordGemmsSeesEveryGEMMOfAStep: forward, one GEMM per input part
// (fc1 reads the dense features and the embeddings) and one for logit;
// backward, a weight gradient per part and an input gradient for every
// part that needs one (not the dense features).
func TestRecordGemmsSeesEveryGEMMOfAStep(t *testing.T) {
	model, err := config.ParseModel("tiny.toml", []byte(tinyCTR))
	if err != nil {
		t.Fatal(err)
	}
	calls, err := recordGemms(model, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3+2+3 {
		t.Fatalf("%d GEMMs recorded, want 8: %+v", len(calls), calls)
	}
	if c := calls[0]; c.transA || c.transB || c.m != 32 || c.n != 8 || c.k != 26*4 {
		t.Fatalf("first GEMM %+v, want fc1's forward on the embeddings (its first part), 32x8 over 104", c)
	}
	l, err := gemmBound(calls, 2, 32, 5)
	if err != nil || !(l.sustained > 0) || l.peak < l.sustained {
		t.Fatalf("GEMM-bound limit %+v samples/s, %v: want a positive rate over the run, at most the fastest step's", l, err)
	}
}
