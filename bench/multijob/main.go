// Command multijob runs a seeded Poisson stream of small training jobs on a
// live loopback cluster, once per allocation policy (fair share, then
// SLAQ's quality), and measures them as `heterps sim` does: average
// normalised quality, time to 90 % / 95 % of each job's loss reduction,
// makespan and the allocator's slowest decision. Each run starts a fresh
// cluster of real processes built from this tree: a heterpsd coordinator
// with --alloc-policy and --alloc-epoch, and node daemons of several
// 1-thread units each, plain loopback. Every job is one stage on one unit
// of one node to start; the allocator then changes its units (its CPU
// share of the node) each epoch. Jobs record their (time, step, loss,
// units, step seconds) history through the job file's trace; the metrics
// come from those real loss histories. Then it feeds the same traces and
// arrivals to the simulator (`heterps sim --trace-dir`) and prints the
// simulator's error against the real run.
//
// It measures and never asserts. It writes its report to --out whole
// (bench/results/multijob.txt), with a header saying the machine, its load,
// the versions and the setup.
//
//	go run ./bench/multijob [--jobs 16] [--arrival-mean 1.5s] [--seed 1] [--policies fair,quality] [--out bench/results/multijob.txt]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/daemon/alloc"
	"github.com/heterps/heterps/native"
)

// options are the command's flags.
type options struct {
	jobs        int
	arrivalMean time.Duration
	seed        uint64
	policies    []alloc.Policy
	nodes       int
	units       int
	epoch       time.Duration
	heartbeat   time.Duration
	timeout     time.Duration
	out         string
	keep        bool
}

func main() {
	native.FixOpenBLASCore() // the header then names the kernels the daemons it starts run
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "multijob:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "multijob:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("multijob", flag.ContinueOnError)
	fs.IntVar(&o.jobs, "jobs", 16, "jobs in the stream (at least 12 for the record)")
	fs.DurationVar(&o.arrivalMean, "arrival-mean", 1500*time.Millisecond, "mean time between arrivals (Poisson)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals and the job kinds")
	policies := fs.String("policies", "fair,quality", "allocation policies to run, in order")
	fs.IntVar(&o.nodes, "nodes", 2, "node daemons")
	fs.IntVar(&o.units, "units", 4, "units (1-thread) per node")
	fs.DurationVar(&o.epoch, "epoch", 2*time.Second, "the coordinator's --alloc-epoch")
	fs.DurationVar(&o.heartbeat, "heartbeat", 250*time.Millisecond, "the coordinator's --heartbeat (loss reports come once a heartbeat)")
	fs.DurationVar(&o.timeout, "timeout", 4*time.Minute, "per policy: give up on jobs not finished by then")
	fs.StringVar(&o.out, "out", "bench/results/multijob.txt", "the report's file (written whole); empty: standard output only")
	fs.BoolVar(&o.keep, "keep", false, "keep the working directory (logs, traces)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, name := range strings.Split(*policies, ",") {
		p, err := alloc.ParsePolicy(strings.TrimSpace(name))
		if err != nil {
			return o, fmt.Errorf("--policies: %w", err)
		}
		o.policies = append(o.policies, p)
	}
	switch {
	case o.jobs < 1:
		return o, fmt.Errorf("--jobs %d: want at least 1", o.jobs)
	case o.nodes < 1 || o.units < 1:
		return o, fmt.Errorf("--nodes %d, --units %d: want at least 1", o.nodes, o.units)
	case o.arrivalMean <= 0 || o.epoch <= 0 || o.heartbeat <= 0 || o.timeout <= 0:
		return o, fmt.Errorf("--arrival-mean, --epoch, --heartbeat and --timeout must be positive")
	}
	return o, nil
}

// policyResult is one policy's real run and the simulator on its traces.
type policyResult struct {
	policy alloc.Policy
	real   metrics
	sim    metrics
	simErr error
	done   int
	failed []string
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "multijob-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "multijob: working directory", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	machine := header.Collect("bench/multijob") // before the load of the runs
	heterpsd, err := loopback.Build(ctx, dir)
	if err != nil {
		return err
	}
	heterps := filepath.Join(dir, "heterps")
	stream, err := newStream(o)
	if err != nil {
		return err
	}
	var results []policyResult
	for _, p := range o.policies {
		fmt.Fprintf(os.Stderr, "multijob: %s: %d jobs\n", p, len(stream))
		pdir := filepath.Join(dir, string(p))
		r, err := runPolicy(ctx, o, heterpsd, pdir, p, stream)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		r.sim, r.simErr = simulateTraces(ctx, heterps, o, filepath.Join(pdir, "traces"), p)
		results = append(results, r)
	}
	var buf bytes.Buffer
	report(&buf, machine, o, stream, results)
	header.WriteLoadAfter(&buf)
	os.Stdout.Write(buf.Bytes())
	if o.out == "" {
		return nil
	}
	return os.WriteFile(o.out, buf.Bytes(), 0o644)
}

// report writes the header, the table and the simulator's errors.
func report(w io.Writer, machine header.Info, o options, stream []streamJob, results []policyResult) {
	machine.Write(w)
	counts := map[string]int{}
	for _, j := range stream {
		counts[j.kind.name]++
	}
	fmt.Fprintf(w, "stream: %d jobs, Poisson arrivals every %v on average (seed %d), kinds:", len(stream), o.arrivalMean, o.seed)
	for _, k := range kinds {
		fmt.Fprintf(w, " %s x%d (%s, batch %d, %d steps);", k.name, counts[k.name], k.data, k.batch, k.steps)
	}
	fmt.Fprintf(w, "\ncluster per policy: heterpsd coordinator (--alloc-epoch %v, --heartbeat %v) + %d node daemons of %d 1-thread units, plain loopback;\n",
		o.epoch, o.heartbeat, o.nodes, o.units)
	fmt.Fprintln(w, "each job starts on one unit of one node; a unit is a 1/units CPU share of its node (duty cycle), so the node's units")
	fmt.Fprintln(w, "together are about one core of this machine")
	fmt.Fprintln(w, "metrics (as heterps sim --json): quality = (L0 - L)/(L0 - Lmin), L the mean of a job's last 5 reported losses, Lmin the")
	fmt.Fprintln(w, "floor of the curve fitted to its whole trace (or its lowest loss); avg quality over epochs of the jobs arrived and not")
	fmt.Fprintln(w, "finished; (fitted): the same with L read off the curve fitted to the job's whole trace at the step it had reached, as")
	fmt.Fprintln(w, "the simulator's jobs do; t90/t95 from arrival to 90 %/95 % of the job's final reduction; makespan from the stream's start;")
	fmt.Fprintln(w, "decision ms: the coordinator's slowest epoch (fits and allocation; the simulator's excludes its fits).")
	fmt.Fprintf(w, "sim: heterps sim --trace-dir (the run's own traces and arrivals) --cores %d --max-units %d --epoch %g: one pool of\n",
		o.nodes*o.units, o.units, o.epoch.Seconds())
	fmt.Fprintln(w, "cores, where the real allocator decides node by node; error = |sim - real| / real (avg quality: against the measured,")
	fmt.Fprintln(w, "then the fitted column)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-9s %-5s %11s %9s %8s %8s %8s %8s %10s %12s %s\n", "policy", "run", "avg quality", "(fitted)", "t90 mean", "t90 p50",
		"t90 p95", "t95 mean", "makespan s", "decision ms", "jobs")
	var fair *policyResult
	for i := range results {
		if results[i].policy == alloc.Fair {
			fair = &results[i]
		}
	}
	for _, r := range results {
		jobs := fmt.Sprintf("%d done", r.done)
		if len(r.failed) > 0 {
			jobs += "; not done: " + strings.Join(r.failed, ", ")
		}
		row(w, string(r.policy), "real", r.real, jobs)
		if r.simErr != nil {
			fmt.Fprintf(w, "%-9s %-5s failed: %v\n", r.policy, "sim", r.simErr)
			continue
		}
		row(w, string(r.policy), "sim", r.sim, "")
		fmt.Fprintf(w, "%-9s %-5s %10.0f%% %8.0f%% %7.0f%% %8s %8s %7.0f%% %9.0f%%\n", r.policy, "error",
			100*relErr(r.sim.AvgQuality, r.real.AvgQuality), 100*relErr(r.sim.AvgQuality, r.real.AvgQualityFit),
			100*relErr(r.sim.MeanTimeTo90, r.real.MeanTimeTo90), "", "",
			100*relErr(r.sim.MeanTimeTo95, r.real.MeanTimeTo95), 100*relErr(r.sim.MakespanS, r.real.MakespanS))
	}
	if fair == nil {
		return
	}
	fmt.Fprintln(w)
	for _, r := range results {
		if r.policy == alloc.Fair {
			continue
		}
		fmt.Fprintf(w, "%s vs fair, real: avg quality x%.2f, mean t90 x%.2f, mean t95 x%.2f", r.policy,
			r.real.AvgQuality/fair.real.AvgQuality, r.real.MeanTimeTo90/fair.real.MeanTimeTo90, r.real.MeanTimeTo95/fair.real.MeanTimeTo95)
		if r.simErr == nil && fair.simErr == nil {
			fmt.Fprintf(w, "; sim: x%.2f, x%.2f, x%.2f", r.sim.AvgQuality/fair.sim.AvgQuality, r.sim.MeanTimeTo90/fair.sim.MeanTimeTo90,
				r.sim.MeanTimeTo95/fair.sim.MeanTimeTo95)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "(paper targets at its contention: >= 1.73x avg quality, <= 0.56x mean t90; simulator within 10 % of the real run)")
}

func row(w io.Writer, policy, run string, m metrics, jobs string) {
	fitted := "-"
	if run == "real" {
		fitted = fmt.Sprintf("%.3f", m.AvgQualityFit)
	}
	fmt.Fprintf(w, "%-9s %-5s %11.3f %9s %8.1f %8.1f %8.1f %8.1f %10.1f %12.2f %s\n", policy, run, m.AvgQuality, fitted, m.MeanTimeTo90,
		m.P50TimeTo90, m.P95TimeTo90, m.MeanTimeTo95, m.MakespanS, m.DecisionMsMax, jobs)
}
