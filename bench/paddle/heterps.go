package main

import (
	"context"

	"github.com/heterps/heterps/bench/internal/heterpsrun"
)

// measured is one side's figure, or why there is none.
type measured struct {
	samplesPerS float64
	loss        float64
	samples     float64 // trained in the timed part
	cpuSeconds  float64 // user + system CPU the processes spent on them, 0 if unknown
	err         error
}

func fromHeterps(r heterpsrun.Result, err error) measured {
	return measured{samplesPerS: r.SamplesPerS, loss: r.Loss, samples: r.Samples, cpuSeconds: r.CPUSeconds, err: err}
}

// heterpsTools are the binaries built from this tree and the catalog of
// psWorkers one-unit cpu-1t nodes `heterps run` starts.
type heterpsTools struct{ heterpsrun.Tools }

func buildHeterps(ctx context.Context, dir string, o options) (heterpsTools, error) {
	t, err := heterpsrun.Build(ctx, dir, o.catalog, "cpu-1t", "paddle", psWorkers, o.timeout)
	return heterpsTools{t}, err
}

func (t heterpsTools) job(o options, batch int) heterpsrun.Job {
	return heterpsrun.Job{Model: modelName, Data: dataSpec, Steps: o.steps, Batch: batch}
}

// train is `heterps train` with threads kernel threads.
func (t heterpsTools) train(ctx context.Context, o options, threads int) measured {
	return fromHeterps(t.Train(ctx, t.job(o, o.batch), threads))
}

// run is `heterps run` of a job of batch samples a step on psWorkers
// one-thread nodes, its throughput floor the one that plans one stage on
// all of them.
func (t heterpsTools) run(ctx context.Context, o options, batch int) measured {
	return fromHeterps(t.Run(ctx, t.job(o, batch), psWorkers, ""))
}

// runAsync is run with the replicas asynchronous (mode = "asp"), as
// Paddle's parameter-server workers are.
func (t heterpsTools) runAsync(ctx context.Context, o options, batch int) measured {
	job := t.job(o, batch)
	job.Mode = "asp"
	return fromHeterps(t.Run(ctx, job, psWorkers, ""))
}
