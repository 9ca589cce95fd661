package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// singleRow is one thread count's single-process pair.
type singleRow struct {
	threads         int
	heterps, paddle measured
}

// report is everything the benchmark measured.
type report struct {
	single              []singleRow
	heterpsPS, paddlePS measured
	// heterpsPSMatched is heterps run at psWorkers times the batch: each
	// replica's step is as large as each Paddle worker's.
	heterpsPSMatched measured
	// heterpsASP is heterps run with asynchronous replicas, Paddle's
	// parameter servers' mode, at the same job batch as heterpsPS.
	heterpsASP measured
}

func (m measured) rate() string {
	if m.err != nil {
		return "not measured"
	}
	return fmt.Sprintf("%.0f", m.samplesPerS)
}

// perCPU is samples per CPU second, "-" when unknown.
func (m measured) perCPU() string {
	if m.err != nil || m.cpuSeconds <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", m.samples/m.cpuSeconds)
}

func (m measured) lossText() string {
	if m.err != nil {
		return "-"
	}
	return fmt.Sprintf("%.4f", m.loss)
}

// ratio is a / b as "1.23x", or "-" when either is missing.
func ratio(a, b measured) string {
	if a.err != nil || b.err != nil || b.samplesPerS <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a.samplesPerS/b.samplesPerS)
}

func (r report) print(w io.Writer) {
	fmt.Fprintln(w, "\nsingle process: heterps train vs Paddle dynamic graph (ctrdnn_single.py)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "threads\theterps samples/s\tPaddle samples/s\theterps/Paddle\theterps per CPU s\tPaddle per CPU s\theterps loss\tPaddle loss\t")
	for _, s := range r.single {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.threads, s.heterps.rate(), s.paddle.rate(), ratio(s.heterps, s.paddle),
			s.heterps.perCPU(), s.paddle.perCPU(), s.heterps.lossText(), s.paddle.lossText())
	}
	tw.Flush()
	fmt.Fprintf(w, "\nparameter servers, %d workers on loopback\n", psWorkers)
	fmt.Fprintf(w, "  heterps run, %d nodes of 1x cpu-1t (one data-parallel stage, BSP, one PS shard on a node), job batch = Paddle's worker batch: %s samples/s, %s per CPU s, loss %s\n",
		psWorkers, r.heterpsPS.rate(), r.heterpsPS.perCPU(), r.heterpsPS.lossText())
	fmt.Fprintf(w, "  the same, replica batch = Paddle's worker batch (job batch x%d): %s samples/s, %s per CPU s, loss %s\n",
		psWorkers, r.heterpsPSMatched.rate(), r.heterpsPSMatched.perCPU(), r.heterpsPSMatched.lossText())
	fmt.Fprintf(w, "  the same, job batch = Paddle's worker batch, replicas asynchronous (mode = \"asp\", as Paddle's workers are): %s samples/s, %s per CPU s, loss %s\n",
		r.heterpsASP.rate(), r.heterpsASP.perCPU(), r.heterpsASP.lossText())
	fmt.Fprintf(w, "  Paddle fleet PS (2.6, async), 1 server + %d one-thread workers: %s samples/s (all workers' timed samples over the union of their windows), %s per CPU s, loss %s\n",
		psWorkers, r.paddlePS.rate(), r.paddlePS.perCPU(), r.paddlePS.lossText())
	if len(r.single) > 0 {
		last := r.single[len(r.single)-1]
		fmt.Fprintf(w, "\nratios, heterps / Paddle (single process at %d threads)\n", last.threads)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "\tvs Paddle single process\tvs Paddle PS\t")
		fmt.Fprintf(tw, "heterps train\t%s\t%s\t\n", ratio(last.heterps, last.paddle), ratio(last.heterps, r.paddlePS))
		fmt.Fprintf(tw, "heterps run, %d nodes, job batch = worker batch\t%s\t%s\t\n", psWorkers, ratio(r.heterpsPS, last.paddle), ratio(r.heterpsPS, r.paddlePS))
		fmt.Fprintf(tw, "heterps run, %d nodes, replica batch = worker batch\t%s\t%s\t\n", psWorkers, ratio(r.heterpsPSMatched, last.paddle), ratio(r.heterpsPSMatched, r.paddlePS))
		fmt.Fprintf(tw, "heterps run, %d nodes, job batch = worker batch, ASP (Paddle's mode)\t%s\t%s\t\n", psWorkers, ratio(r.heterpsASP, last.paddle), ratio(r.heterpsASP, r.paddlePS))
		tw.Flush()
	}
	fmt.Fprintln(w, "per CPU s: samples trained per second of user+system CPU, which the other work on a shared machine does not dilute;")
	fmt.Fprintln(w, "Paddle's CPU is its timed window's (workers and server for PS), heterps' the whole command's (start, and for heterps run")
	fmt.Fprintln(w, "the coordinator and node daemons, included), so the heterps figures are the conservative ones")
	fmt.Fprintln(w, "loss: heterps' own (an EMA of the step losses); Paddle's the mean of its last 50 steps (each worker's, averaged)")
	fmt.Fprintln(w, "targets: heterps >= 2x Paddle's parameter-server mode and >= 1.5x its single-process training")
	r.printFailures(w)
}

// printFailures says why each missing figure is missing.
func (r report) printFailures(w io.Writer) {
	var lines []string
	for _, s := range r.single {
		if s.heterps.err != nil {
			lines = append(lines, fmt.Sprintf("heterps train, %d threads: %v", s.threads, s.heterps.err))
		}
		if s.paddle.err != nil {
			lines = append(lines, fmt.Sprintf("Paddle single process, %d threads: %v", s.threads, s.paddle.err))
		}
	}
	if r.heterpsPS.err != nil {
		lines = append(lines, fmt.Sprintf("heterps run: %v", r.heterpsPS.err))
	}
	if r.heterpsPSMatched.err != nil {
		lines = append(lines, fmt.Sprintf("heterps run, replica batch = worker batch: %v", r.heterpsPSMatched.err))
	}
	if r.heterpsASP.err != nil {
		lines = append(lines, fmt.Sprintf("heterps run, ASP: %v", r.heterpsASP.err))
	}
	if r.paddlePS.err != nil {
		lines = append(lines, fmt.Sprintf("Paddle PS: %v", r.paddlePS.err))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\nnot measured:")
	for _, l := range lines {
		fmt.Fprintln(w, "  "+l)
	}
}
