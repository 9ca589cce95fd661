package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/place"
)

// dataFor is the generator each zoo model trains on here.
var dataFor = map[string]string{
	"ctrdnn": "synthetic:1", "ctrdnn-8": "synthetic:1", "ctrdnn-12": "synthetic:1", "ctrdnn-16": "synthetic:1",
	"ctrdnn-20": "synthetic:1", "2emb": "synthetic:1", "avazu": "synthetic:1", "matchnet": "pairs:1", "nce": "words:1",
	"linreg": "regress:1",
}

// simulatorVsMeasured sets the simulator's step of each zoo model with every
// op on one core of this CPU (op times measured with the kernels) against
// the step the real trainer (daemon/nn, one thread) takes on batches
// generated beforehand. Both are best cases — each kernel's fastest of 5
// runs, the trainer's fastest of 3 x steps steps — because on a shared
// machine only the fastest run is free of other processes' time.
func (b *bench) simulatorVsMeasured(batch, steps int, graphs []string) error {
	fmt.Fprintf(output, "\n== simulator vs measured: every op on one core of this CPU, batch %d (real: daemon/nn trainer, 1 thread,\n", batch)
	fmt.Fprintf(output, "   the fastest of 3 x %d steps on pre-generated batches; simulated: each kernel's fastest of 5 runs alone;\n", steps)
	fmt.Fprintln(output, "   in-step: each op's fastest of 5 steps of the graph executed on one core, its buffers as the ops before left the caches)")
	tw := tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tsimulated ms\tin-step ms\tmeasured ms\tsimulated / measured\tin-step / measured\t")
	local, err := place.LoadDevices("local")
	if err != nil {
		return err
	}
	worst, worstInStep := 0.0, 0.0
	for _, name := range config.ZooNames() {
		spec, ok := dataFor[name]
		if !ok || !slices.Contains(graphs, name) {
			continue
		}
		sim, inStep, real, err := b.compareStep(name, spec, batch, steps, local.Devices[:1])
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		worst, worstInStep = math.Max(worst, math.Abs(sim/real-1)), math.Max(worstInStep, math.Abs(inStep/real-1))
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t\n", name, sim*1e3, inStep*1e3, real*1e3, sim/real, inStep/real)
	}
	tw.Flush()
	fmt.Fprintf(output, "largest gap %.1f%%, in-step %.1f%% (target: within 15%%)\n", 100*worst, 100*worstInStep)
	return nil
}

func (b *bench) compareStep(name, spec string, batch, steps int, core []place.Device) (sim, inStep, real float64, err error) {
	cfg, err := config.LoadModel(name)
	if err != nil {
		return 0, 0, 0, err
	}
	g, err := place.FromModel(cfg, batch)
	if err != nil {
		return 0, 0, 0, err
	}
	alone, err := place.Measure(context.Background(), g, b.be, 5)
	if err != nil {
		return 0, 0, 0, err
	}
	if sim, err = oneCoreStep(g, core, alone); err != nil {
		return 0, 0, 0, err
	}
	stepped, err := place.MeasureInStep(context.Background(), g, 1, 5)
	if err != nil {
		return 0, 0, 0, err
	}
	if inStep, err = oneCoreStep(g, core, stepped); err != nil {
		return 0, 0, 0, err
	}
	real, err = b.trainStep(cfg, spec, batch, steps)
	return sim, inStep, real, err
}

// oneCoreStep is the simulated step of g with every op on core, the op
// times m's.
func oneCoreStep(g *place.Graph, core []place.Device, m *place.Measured) (float64, error) {
	s, err := place.NewSimulator(g, core)
	if err != nil {
		return 0, err
	}
	s.UseMeasured(m)
	r, err := s.Run(make([]int, len(g.Ops)))
	return r.Step, err
}

// trainStep is the real trainer's seconds per step.
func (b *bench) trainStep(cfg *config.Model, spec string, batch, steps int) (float64, error) {
	src, err := data.Open(spec, data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	if err != nil {
		return 0, err
	}
	defer src.Close()
	if err := nn.CheckData(cfg, src.Schema()); err != nil {
		return 0, err
	}
	batches := make([]*data.Batch, steps)
	for i := range batches {
		if batches[i], err = src.Next(context.Background(), batch); err != nil {
			return 0, err
		}
	}
	tr, err := nn.NewTrainer(b.be, cfg, 1, int64(4*steps))
	if err != nil {
		return 0, err
	}
	if _, err := tr.Step(batches[0]); err != nil { // warm-up
		return 0, err
	}
	best := math.Inf(1)
	for range 3 {
		for _, bt := range batches {
			start := time.Now()
			if _, err := tr.Step(bt); err != nil {
				return 0, err
			}
			best = math.Min(best, time.Since(start).Seconds())
		}
	}
	return best, nil
}
