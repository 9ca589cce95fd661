package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// The 2-stage pipeline runs: ctrdnn split after its first FC layer (the
// embeddings, the concat and FC 512 | FC 256-128-32-1), one replica a
// stage at one thread each, its parameters on one in-process BSP parameter
// server, the stages talking over loopback TCP, as pipeline.Workers driven
// directly (not through the coordinator, whose planner picks its own
// stages). It runs under each schedule in turn on the same batches.
var pipeStages = []pipeline.Range{{First: 0, Last: 2}, {First: 3, Last: 6}}

const pipeJob = "bench-pipe"

// pipeOutcome is what one pipeline run measured.
type pipeOutcome struct {
	samplesPerS float64 // after the first step
	loss        float64 // of the last step
	peakLive    []int   // per stage: the most micro-batches live at once (Result.PeakLive)
}

// pipeSchedule is a schedule the pipeline block runs: 1F1B with its
// lookahead, or fill-drain.
type pipeSchedule struct {
	schedule  pipeline.Schedule
	lookahead int
}

func (p pipeSchedule) String() string {
	if p.schedule == pipeline.FillDrain {
		return string(p.schedule)
	}
	return fmt.Sprintf("%s, lookahead %d", p.schedule, p.lookahead)
}

// pipeSchedules are 1F1B as jobs run it by default, strict 1F1B and
// fill-drain.
var pipeSchedules = []pipeSchedule{
	{pipeline.OneFOneB, config.DefaultLookahead}, {pipeline.OneFOneB, 0}, {pipeline.FillDrain, 0},
}

// pipelineBlock prints the pipeline under each of pipeSchedules, the best
// of repeats runs each. Round r starts at schedule r (mod their count), so
// that no schedule always runs first in the process, before the earlier
// runs have grown its heap and warmed its caches.
func pipelineBlock(ctx context.Context, model *config.Model, batch, steps, micro, repeats int, w io.Writer) error {
	fmt.Fprintf(w, "2-stage pipeline (layers %v), 1 replica a stage at 1 thread, %d micro-batches, in-process PS, best of %d (rounds rotate the order):\n",
		pipeStages, micro, repeats)
	best := make([]*pipeOutcome, len(pipeSchedules))
	runs := make([][]string, len(pipeSchedules))
	for r := range repeats {
		for k := range pipeSchedules {
			i := (r + k) % len(pipeSchedules)
			res, err := pipelineRun(ctx, model, batch, steps, micro, pipeSchedules[i])
			if err != nil {
				return fmt.Errorf("pipeline, %s: %w", pipeSchedules[i], err)
			}
			runs[i] = append(runs[i], fmt.Sprintf("%.0f", res.samplesPerS))
			if best[i] == nil || res.samplesPerS > best[i].samplesPerS {
				best[i] = res
			}
		}
	}
	for i, s := range pipeSchedules {
		fmt.Fprintf(w, "  %-18s %8.0f samples/s (runs %s), peak live micro-batches per stage %v, loss %.4f\n",
			s, best[i].samplesPerS, strings.Join(runs[i], " "), best[i].peakLive, best[i].loss)
	}
	return nil
}

// pipelineRun trains the pipeline for steps under schedule s.
func pipelineRun(ctx context.Context, model *config.Model, batch, steps, micro int, s pipeSchedule) (*pipeOutcome, error) {
	var wg sync.WaitGroup
	defer wg.Wait() // after everything below: the PS stops last
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	psAddr, err := servePipelinePS(ctx, &wg, model, steps)
	if err != nil {
		return nil, err
	}
	trs, err := pipeTransports()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, tr := range trs {
			tr.Close()
		}
	}()
	src, err := trainingData(model)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var workers []*pipeline.Worker
	var clients []*ps.Client
	defer func() {
		for i, pw := range workers {
			pw.Close()
			clients[i].Close()
		}
	}()
	for st := range pipeStages {
		client, err := ps.NewClient(ps.ClientConfig{Job: pipeJob, Stage: st, Shards: 1, Timeout: time.Minute,
			Dial: func(ctx context.Context, _ int) (*wire.Conn, error) {
				return wire.Dial(ctx, psAddr, pipeWire(pipeNode(st, 0)), "ps")
			}})
		if err != nil {
			return nil, err
		}
		pw, err := pipeWorker(model, st, client, trs[st], micro, int64(steps), s,
			func(ctx context.Context, _ int64) (*data.Batch, error) { return src.Next(ctx, batch) })
		if err != nil {
			client.Close()
			return nil, fmt.Errorf("stage %d: %w", st, err)
		}
		workers, clients = append(workers, pw), append(clients, client)
	}
	return trainPipeline(ctx, workers, batch, steps)
}

// trainPipeline runs every worker's steps at once and times the last
// stage from the end of step 1.
func trainPipeline(ctx context.Context, workers []*pipeline.Worker, batch, steps int) (*pipeOutcome, error) {
	out := &pipeOutcome{peakLive: make([]int, len(workers))}
	errs := make([]error, len(workers))
	var start, end time.Time
	var wg sync.WaitGroup
	for st, pw := range workers {
		wg.Go(func() {
			for step := 1; step <= steps; step++ {
				res, err := pw.Step(ctx, int64(step))
				if err != nil {
					errs[st] = err
					return
				}
				out.peakLive[st] = max(out.peakLive[st], res.PeakLive)
				if st == len(workers)-1 {
					if step == 1 {
						start = time.Now()
					}
					end, out.loss = time.Now(), res.Loss
				}
			}
		})
	}
	wg.Wait()
	for st, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("stage %d: %w", st, err)
		}
	}
	out.samplesPerS = float64((steps-1)*batch) / end.Sub(start).Seconds()
	return out, nil
}

// servePipelinePS serves the pipeline's parameters from one BSP shard on
// loopback until ctx ends (wg waits for it) and returns its address.
func servePipelinePS(ctx context.Context, wg *sync.WaitGroup, model *config.Model, steps int) (string, error) {
	declared, err := pipeline.DeclareModel(native.MustCPU(), model, 1)
	if err != nil {
		return "", err
	}
	tables, blocks, err := pipeline.PSParams(declared, pipeStages, int64(steps))
	if err != nil {
		return "", err
	}
	spec := pipeline.ShardSpec{Job: pipeJob, Model: model.Name, Shards: 1, Mode: ps.BSP, Replicas: []int{1, 1},
		WaitTimeout: time.Minute, Backend: native.MustCPU()}
	var shards []*ps.Shard
	for _, c := range pipeline.ShardConfigs(spec, tables, blocks) {
		sh, err := ps.NewShard(c)
		if err != nil {
			return "", err
		}
		shards = append(shards, sh)
	}
	svc, err := ps.NewService(ps.ServiceOptions{Logger: slog.New(slog.DiscardHandler)}, shards...)
	if err != nil {
		return "", err
	}
	ln, err := wire.Listen("127.0.0.1:0", pipeWire("ps"))
	if err != nil {
		return "", err
	}
	wg.Go(func() {
		svc.Serve(ctx, ln)
		ln.Close()
	})
	return ln.Addr().String(), nil
}

func pipeWire(node string) wire.Config {
	return wire.Config{NodeID: node, Plain: true, Logger: slog.New(slog.DiscardHandler)}
}

func pipeNode(stage, _ int) string { return fmt.Sprintf("pipe-s%d", stage) }

// pipeTransports starts one transport a stage, each knowing the other.
func pipeTransports() ([]*wire.TCPTransport, error) {
	var trs []*wire.TCPTransport
	for st := range pipeStages {
		tr, err := wire.NewTCPTransport("127.0.0.1:0", pipeWire(pipeNode(st, 0)))
		if err != nil {
			for _, t := range trs {
				t.Close()
			}
			return nil, err
		}
		trs = append(trs, tr)
	}
	// The larger id learns of its peer first, or it would turn the first
	// dial away.
	for _, pair := range [][2]int{{1, 0}, {0, 1}} {
		a, b := trs[pair[0]], trs[pair[1]]
		if err := a.AddPeer(pipeNode(pair[1], 0), b.Addr().String()); err != nil {
			for _, t := range trs {
				t.Close()
			}
			return nil, err
		}
	}
	return trs, nil
}

// pipeWorker builds stage st's worker; batches feeds stage 0.
func pipeWorker(model *config.Model, st int, client *ps.Client, tr *wire.TCPTransport, micro int, steps int64, s pipeSchedule,
	batches func(context.Context, int64) (*data.Batch, error)) (*pipeline.Worker, error) {
	backend, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		return nil, err
	}
	m, err := pipeline.BuildStageModel(backend, model, 1, pipeStages[st])
	if err != nil {
		return nil, err
	}
	cfg := pipeline.Config{Job: pipeJob, Stage: st, Stages: len(pipeStages), Layers: pipeStages[st], Model: m, Backend: backend,
		PS: client, Mode: ps.BSP, MicroBatches: micro, Schedule: s.schedule, Lookahead: s.lookahead, LastStep: steps}
	cfg.Prev, cfg.Next = pipeline.PartnerLinks(tr, st, 0, []int{1, 1}, pipeNode)
	if st == 0 {
		cfg.Batches = batches
	}
	return pipeline.NewWorker(cfg)
}
