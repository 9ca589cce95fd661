package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestDataParallelPrintsBothSidesAgainstTheirOwnSingleProcess(t *testing.T) {
	var buf bytes.Buffer
	output = &buf
	t.Cleanup(func() { output = os.Stdout })
	ours := dpSide{name: "heterps run", samplesPerS: 90000, loss: 0.5, single: 150000}
	theirs := dpSide{name: "PyTorch DDP", samplesPerS: 30000, loss: 0.51, single: 40000}
	printDataParallel(2, 2, ours, theirs)
	got := strings.Join(strings.Fields(buf.String()), " ")
	for _, want := range []string{"heterps run 90000 0.60x 0.5000", "PyTorch DDP 30000 0.75x 0.5100",
		"heterps run / PyTorch DDP at 2 processes: 3.00x", "of its own single process at 2 threads"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, buf.String())
		}
	}
}

func TestDataParallelNamesASideThatCouldNotRun(t *testing.T) {
	var buf bytes.Buffer
	output = &buf
	t.Cleanup(func() { output = os.Stdout })
	ours := dpSide{name: "heterps run", samplesPerS: 90000, loss: 0.5, single: 150000}
	theirs := dpSide{name: "PyTorch DDP", single: 40000, err: errors.New("no module named torch")}
	printDataParallel(2, 2, ours, theirs)
	got := strings.Join(strings.Fields(buf.String()), " ")
	for _, want := range []string{"PyTorch DDP not measured - -", "PyTorch DDP not measured: no module named torch"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, buf.String())
		}
	}
	if strings.Contains(got, "heterps run / PyTorch DDP") {
		t.Errorf("a ratio against a side not measured:\n%s", buf.String())
	}
}

func TestDataParallelKeepsTheBestRun(t *testing.T) {
	var s dpSide
	s.keepBest(0, 0, errors.New("first run lost a node"))
	if s.err == nil {
		t.Fatal("an error with no figure yet is not kept")
	}
	s.keepBest(80000, 0.52, nil)
	s.keepBest(70000, 0.53, nil)
	s.keepBest(0, 0, errors.New("third run failed"))
	if s.err != nil || s.samplesPerS != 80000 || s.loss != 0.52 {
		t.Errorf("kept %+v, want the 80000 run's figures and no error", s)
	}
}
