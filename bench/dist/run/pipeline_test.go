package main

import (
	"context"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/pipeline"
)

// A short pipeline run under each schedule trains the same batches to the
// same loss and reports the live micro-batches each stage held: the
// pipeline's depth under strict 1F1B, one more with a lookahead of 1,
// every micro-batch under fill-drain (the last stage holds one either
// way).
func TestPipelineRunReportsEachSchedulesPeak(t *testing.T) {
	model, err := config.LoadModel(modelName)
	if err != nil {
		t.Fatal(err)
	}
	const batch, steps, micro = 16, 3, 4
	want := map[pipeSchedule][]int{
		{pipeline.OneFOneB, 0}: {2, 1}, {pipeline.OneFOneB, 1}: {3, 1}, {pipeline.FillDrain, 0}: {micro, 1},
	}
	losses := map[pipeSchedule]float64{}
	for s, peaks := range want {
		res, err := pipelineRun(context.Background(), model, batch, steps, micro, s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		for st, p := range peaks {
			if res.peakLive[st] != p {
				t.Errorf("%s: stage %d held %d micro-batches live, want %d", s, st, res.peakLive[st], p)
			}
		}
		if !(res.samplesPerS > 0) {
			t.Errorf("%s: %v samples/s", s, res.samplesPerS)
		}
		losses[s] = res.loss
	}
	for s, loss := range losses {
		if loss != losses[pipeSchedule{pipeline.FillDrain, 0}] {
			t.Errorf("%s: loss %v, fill-drain's %v; want the same", s, loss, losses[pipeSchedule{pipeline.FillDrain, 0}])
		}
	}
}
