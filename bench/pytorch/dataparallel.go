package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"text/tabwriter"

	"github.com/heterps/heterps/bench/internal/heterpsrun"
	"github.com/heterps/heterps/config"
)

// singleResult is one thread count's single-process pair of samples/s.
type singleResult struct {
	threads      int
	ours, theirs float64
}

// ddpResult is what ctrdnn_ddp.py prints.
type ddpResult struct {
	Torch       string  `json:"torch"`
	SamplesPerS float64 `json:"samples_per_s"`
	Loss        float64 `json:"loss_last50"`
}

// dpSide is one system's data-parallel figure, or why there is none.
type dpSide struct {
	name        string
	samplesPerS float64
	loss        float64
	single      float64 // its own single process at the most threads, this run
	err         error
}

// dataParallel trains the model data-parallel on procs one-thread
// processes of each system, the global batch split over them: heterps run
// on procs one-unit cpu-1t node daemons (dense parameters by allreduce,
// sparse rows on a parameter-server shard) and PyTorch DDP on procs gloo
// ranks, and prints both against each other and against their own single
// process of this run.
func dataParallel(dir string, procs int, single singleResult) error {
	ctx := context.Background()
	tools, err := heterpsrun.Build(ctx, dir, *catalog, "cpu-1t", "pytorch", procs, *timeout)
	if err != nil {
		return err
	}
	job := heterpsrun.Job{Model: "ctrdnn", Data: "synthetic:1", Steps: *warmup + *steps, Batch: *batch}
	ours := dpSide{name: "heterps run", single: single.ours}
	theirs := dpSide{name: "PyTorch DDP", single: single.theirs}
	for range *dpRepeats { // alternating, the best of each counts
		r, err := tools.Run(ctx, job, procs, config.DenseSyncAllreduce)
		ours.keepBest(r.SamplesPerS, r.Loss, err)
		d, err := runDDP(dir, procs)
		theirs.keepBest(d.SamplesPerS, d.Loss, err)
	}
	printDataParallel(procs, single.threads, ours, theirs)
	return nil
}

// keepBest keeps a run's figure if it is the side's best so far; an error
// is kept only while no run has a figure.
func (s *dpSide) keepBest(samplesPerS, loss float64, err error) {
	switch {
	case err != nil:
		if s.samplesPerS == 0 {
			s.err = err
		}
	case samplesPerS > s.samplesPerS:
		s.samplesPerS, s.loss, s.err = samplesPerS, loss, nil
	}
}

// runDDP is one run of ctrdnn_ddp.py on procs one-thread ranks.
func runDDP(dir string, procs int) (ddpResult, error) {
	var d ddpResult
	port, err := freePort()
	if err != nil {
		return d, err
	}
	err = runPython("ctrdnn_ddp.py", 1, &d, "--data", dir, "--world", strconv.Itoa(procs), "--threads", "1",
		"--steps", strconv.Itoa(*steps), "--warmup", strconv.Itoa(*warmup), "--port", strconv.Itoa(port))
	return d, err
}

func printDataParallel(procs, threads int, ours, theirs dpSide) {
	fmt.Fprintf(output, "\ndata parallel on loopback: %d processes of 1 thread, each step's batch of %d split over them (%d rows each), the same model and optimisers\n",
		procs, *batch, *batch/procs)
	fmt.Fprintf(output, "  heterps run: a coordinator and %d cpu-1t node daemons, BSP, dense parameters by allreduce, sparse rows on one parameter-server shard, synthetic:1 read as a stream (%d steps, its own figure)\n",
		procs, *warmup+*steps)
	fmt.Fprintf(output, "  PyTorch DDP: %d ranks over gloo, dense gradients by allreduce, the embedding's sparse gradients by gloo's sparse allreduce, a full table on every rank, the batches above (%d timed steps after %d)\n",
		procs, *steps, *warmup)
	w := tabwriter.NewWriter(output, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(output, "  best of %d runs of each, alternating\n", *dpRepeats)
	fmt.Fprintf(w, "system\tsamples/s\tof its own single process at %d threads\tloss\t\n", threads)
	for _, s := range []dpSide{ours, theirs} {
		if s.err != nil {
			fmt.Fprintf(w, "%s\tnot measured\t-\t-\t\n", s.name)
			continue
		}
		fmt.Fprintf(w, "%s\t%.0f\t%.2fx\t%.4f\t\n", s.name, s.samplesPerS, s.samplesPerS/s.single, s.loss)
	}
	w.Flush()
	if ours.err == nil && theirs.err == nil {
		fmt.Fprintf(output, "heterps run / PyTorch DDP at %d processes: %.2fx\n", procs, ours.samplesPerS/theirs.samplesPerS)
	}
	for _, s := range []dpSide{ours, theirs} {
		if s.err != nil {
			fmt.Fprintf(output, "%s not measured: %v\n", s.name, s.err)
		}
	}
}

// freePort is a loopback port free a moment ago, for DDP's rendezvous.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
