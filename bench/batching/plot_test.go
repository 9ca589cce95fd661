package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
)

// levelRun is a run that reaches loss 1 at time reach from its start
// (losses 3 then 1), finishing a second later.
func levelRun(m modelSpec, sync string, h int, mode string, reach time.Duration) *trace {
	t := &trace{part: partLevels, model: m, sync: sync, level: h, shares: sharePairs[h], mode: mode, started: t0, finished: t0.Add(reach + time.Second)}
	t.samples = []sample{{at: t0.Add(time.Second), job: "j", step: 5, loss: 3}, {at: t0.Add(reach), job: "j", step: int64(m.steps), loss: 1}}
	return t
}

func plotResults() *results {
	m := models["ctrdnn"]
	m.steps = 10
	g := &levelResults{model: m, sync: syncBSP, levels: []int{1, 6}, modes: []string{config.BatchingUniform, config.BatchingDynamic}, runs: map[int]map[string]*trace{}}
	g.runs[1] = map[string]*trace{config.BatchingUniform: levelRun(m, syncBSP, 1, config.BatchingUniform, 4*time.Second),
		config.BatchingDynamic: levelRun(m, syncBSP, 1, config.BatchingDynamic, 5*time.Second)}
	never := levelRun(m, syncBSP, 6, config.BatchingUniform, 9*time.Second)
	never.samples[1].loss = 3
	g.runs[6] = map[string]*trace{config.BatchingUniform: never, config.BatchingDynamic: levelRun(m, syncBSP, 6, config.BatchingDynamic, 6*time.Second)}
	return &results{groups: []*levelResults{g}}
}

func TestTargetSeriesHasOneLinePerModeWithTheReachedLevels(t *testing.T) {
	o := options{emaWeight: 1, targetAt: 1}
	got := targetSeries(plotResults(), "ctrdnn", o)
	if len(got) != 2 || got[0].name != "BSP uniform" || got[1].name != "BSP dynamic" {
		t.Fatalf("series %+v: want BSP uniform and BSP dynamic", got)
	}
	if len(got[0].xys) != 1 || got[0].xys[0].X != 1 || got[0].xys[0].Y != 4 {
		t.Errorf("uniform: %v, want only H-1 at 4 s (H-6 never reached the target)", got[0].xys)
	}
	if len(got[1].xys) != 2 || got[1].xys[1].X != 6 || got[1].xys[1].Y != 6 {
		t.Errorf("dynamic: %v, want H-1 and H-6 (6 s)", got[1].xys)
	}
	top, curves := curveSeries(plotResults(), "ctrdnn", o)
	if top != 6 || len(curves) != 2 || len(curves[1].xys) != 2 || curves[1].xys[1].X != 6 {
		t.Errorf("curves at H-%d: %+v; want H-6's two runs, dynamic reaching its last step at 6 s", top, curves)
	}
}

func TestWritePlotDrawsARowPerModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "batching.png")
	if err := writePlot(path, plotResults(), options{emaWeight: 1, targetAt: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("%s is no PNG: %v", path, err)
	}
	if cfg.Width <= cfg.Height {
		t.Errorf("%dx%d: one model's row should be wider than high (two panels side by side)", cfg.Width, cfg.Height)
	}
	if err := writePlot(path, &results{}, options{}); err == nil {
		t.Error("writePlot with no runs succeeded")
	}
}
