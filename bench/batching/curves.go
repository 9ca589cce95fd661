package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
)

// curvesHeader names the columns of the loss-curve CSV: one row per
// sample that reports a new step, time from the run's start.
var curvesHeader = []string{"part", "model", "sync", "level", "mode", "resize", "job", "time_s", "step", "loss", "loss_ema", "adjustments", "batch_n0", "batch_n1"}

// writeCurves writes every run's loss curve as CSV; failed runs are left
// out.
func writeCurves(w io.Writer, runs []*trace, o options) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(curvesHeader); err != nil {
		return err
	}
	for _, t := range runs {
		if t.err != nil {
			continue
		}
		ema := lossEMA(t.samples, o.emaWeight)
		for i, isNew := range fresh(t.samples) {
			if !isNew {
				continue
			}
			s := t.samples[i]
			b0, b1 := "", ""
			if len(s.batches) == replicas {
				b0, b1 = strconv.Itoa(s.batches[0]), strconv.Itoa(s.batches[1])
			}
			cw.Write([]string{t.part, t.model.name, t.sync, strconv.Itoa(t.level), t.mode, t.resize, s.job,
				strconv.FormatFloat(s.at.Sub(t.started).Seconds(), 'f', 3, 64), strconv.FormatInt(s.step, 10),
				strconv.FormatFloat(s.loss, 'g', 6, 64), strconv.FormatFloat(ema[i], 'g', 6, 64),
				strconv.Itoa(s.adjustments), b0, b1})
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeCurvesFile writes the curves into path.
func writeCurvesFile(path string, runs []*trace, o options) error {
	var buf bytes.Buffer
	if err := writeCurves(&buf, runs, o); err != nil {
		return fmt.Errorf("loss curves: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the loss curves to %s: %w", path, err)
	}
	return nil
}
