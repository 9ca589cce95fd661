package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/heterps/heterps/daemon/alloc"
)

func TestTrainTraceRecordsEveryStep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "linreg.jsonl")
	code, _, errs := trainCLI(t, "--model", "linreg", "--data", "regress", "--steps", "30", "--batch", "32", "--threads", "1",
		"--eval-samples", "100", "--trace", path)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, err := alloc.ReadTrace(path, f)
	if err != nil || len(lines) != 30 {
		t.Fatalf("%d lines (%v), want 30", len(lines), err)
	}
	for i, l := range lines {
		if l.Step != int64(i+1) || l.Units != 1 || !(l.StepSeconds > 0) || !(l.Loss > 0) {
			t.Fatalf("line %d: %+v", i, l)
		}
	}
	if lines[29].Loss >= lines[0].Loss {
		t.Errorf("loss %g at the end, %g at the start: want it falling", lines[29].Loss, lines[0].Loss)
	}
}
