package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/heterps/heterps/bench/internal/heterpsbin"
	"github.com/heterps/heterps/bench/internal/planlimit"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

func localUnit(t *testing.T) (config.CatalogType, *config.Model) {
	t.Helper()
	cat, err := config.LoadCatalog("local")
	if err != nil {
		t.Fatal(err)
	}
	unit, _ := cat.Type("cpu-1t")
	m, err := config.LoadModel(modelName)
	if err != nil {
		t.Fatal(err)
	}
	return unit, m
}

// TestFloorPinsTheUnits: the floor found makes the exact plan use n units.
func TestFloorPinsTheUnits(t *testing.T) {
	unit, m := localUnit(t)
	cat := benchCatalog(unit, 4)
	for _, n := range []int{1, 2, 4} {
		limit, err := floorFor(context.Background(), cat, m, jobTOML(n, 512, 10, 0, "ps", ""), n)
		if err != nil {
			t.Fatalf("%d units: %v", n, err)
		}
		p, err := problemOf(cat, m, jobTOML(n, 512, 10, limit, "ps", ""))
		if err != nil || p.ThroughputLimit != limit {
			t.Fatalf("%d units: limit %g not in the job's problem (%v)", n, limit, err)
		}
	}
}

// TestNoFloorWhenTheProfileSaysMoreUnitsAreNoFaster: with alpha = 0 the
// plan never takes a second unit, and floorFor says so with planlimit.ErrNoFloor
// (the benchmark then pins the units on the catalog's plan).
func TestNoFloorWhenTheProfileSaysMoreUnitsAreNoFaster(t *testing.T) {
	unit, m := localUnit(t)
	cat := benchCatalog(unit, 2)
	p, err := problemOf(cat, m, jobTOML(2, 512, 10, 0, "ps", ""))
	if err != nil {
		t.Fatal(err)
	}
	for l := range p.Layers {
		p.Layers[l].Alpha[0] = 0
	}
	src, err := p.Config().MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(prof, src, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := floorFor(context.Background(), cat, m, jobTOML(2, 512, 10, 0, "ps", prof), 2); !errors.Is(err, planlimit.ErrNoFloor) {
		t.Fatalf("got %v, want planlimit.ErrNoFloor", err)
	}
	if _, err := floorFor(context.Background(), cat, m, jobTOML(1, 512, 10, 0, "ps", prof), 1); err != nil {
		t.Fatalf("1 unit on the profile: %v", err)
	}
}

func TestParseLists(t *testing.T) {
	var o options
	o.steps, o.batch, o.runs = 10, 512, 3
	if err := parseLists(&o, "1,2,4", "ps,allreduce,auto"); err != nil || len(o.nodes) != 3 || len(o.denseSync) != 3 {
		t.Fatalf("%v %+v", err, o)
	}
	for _, c := range [][2]string{{"0", "ps"}, {"2", "nccl"}, {"x", "ps"}} {
		o := options{steps: 10, batch: 512, runs: 3}
		if err := parseLists(&o, c[0], c[1]); err == nil {
			t.Errorf("--nodes %s --dense-sync %s accepted", c[0], c[1])
		}
	}
	if err := parseLists(&options{steps: 10, batch: 512}, "1", "ps"); err == nil {
		t.Error("--runs 0 accepted")
	}
}

// TestMedianStagesKeepsEachStagesMiddleRun: the measured throughput
// compared is each stage's median over the runs, not the first run's, and
// every run is listed in order.
func TestMedianStagesKeepsEachStagesMiddleRun(t *testing.T) {
	run := func(xs ...float64) *heterpsbin.Result {
		r := &heterpsbin.Result{}
		for i, x := range xs {
			r.Stages = append(r.Stages, api.StageStatus{Stage: i, MeasuredThroughput: x})
		}
		return r
	}
	results := []*heterpsbin.Result{run(90, 10), run(70, 30), run(80, 20)}
	r, runs := medianStages(results)
	if r.Stages[0].MeasuredThroughput != 80 || r.Stages[1].MeasuredThroughput != 20 {
		t.Errorf("medians %v and %v, want 80 and 20", r.Stages[0].MeasuredThroughput, r.Stages[1].MeasuredThroughput)
	}
	if runs[0] != "90 70 80" || runs[1] != "10 30 20" {
		t.Errorf("runs listed %q", runs)
	}
	if results[0].Stages[0].MeasuredThroughput != 90 {
		t.Error("the first run's result was changed")
	}
	if r, _ := medianStages(results[:2]); r.Stages[0].MeasuredThroughput != 80 {
		t.Errorf("median of two runs %v, want their mean 80", r.Stages[0].MeasuredThroughput)
	}
}
