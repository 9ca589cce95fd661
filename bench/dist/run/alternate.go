package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/heterps/heterps/config"
)

// arm is one configuration the bench times: a distributed job, the single
// process it is held against, or the loopback limit.
type arm struct {
	name string
	run  func(context.Context) (*outcome, error)
}

// alternate runs every arm once a round, in order, for rounds rounds, each
// run under timeout, so that a slow stretch of this shared host falls on
// every arm alike: a ratio of two arms is of runs minutes apart at most,
// never of a reference measured in a quieter (or busier) hour. It returns
// each arm's runs in arms' order and stops at the first failure, naming
// the arm.
func alternate(ctx context.Context, rounds int, timeout time.Duration, arms []arm) ([]repeated, error) {
	out := make([]repeated, len(arms))
	for range rounds {
		for i, a := range arms {
			actx, cancel := context.WithTimeout(ctx, timeout)
			res, err := a.run(actx)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.name, err)
			}
			out[i].all = append(out[i].all, res.samplesPerS)
			if out[i].best == nil || res.samplesPerS > out[i].best.samplesPerS {
				out[i].best = res
			}
		}
	}
	return out, nil
}

// nodeArms are the arms of an n-node block, in the order each round runs
// them: single-process training at refThreads threads (on as many CPUs),
// the loopback limit (n unsynchronised trainers, when n >= 2), then the
// job under each of o.denseSync.
func nodeArms(o options, model *config.Model, unit config.CatalogType, cat *config.Catalog, n, batch int, limit float64,
	refThreads int, distribute distributor) []arm {
	arms := []arm{{name: fmt.Sprintf("single process, %d threads", refThreads), run: func(ctx context.Context) (*outcome, error) {
		defer onCPUs(refThreads)()
		r, err := singleProcess(ctx, model, refThreads, batch, o.steps)
		if err != nil {
			return nil, err
		}
		return &outcome{samplesPerS: r}, nil
	}}}
	if hasLimit(n, batch) {
		threads := unitThreads(unit.Name)
		arms = append(arms, arm{name: fmt.Sprintf("loopback limit of %d nodes", n), run: func(ctx context.Context) (*outcome, error) {
			r, err := unsynced(ctx, model, n, threads, batch/n, o.steps)
			if err != nil {
				return nil, err
			}
			return &outcome{samplesPerS: r}, nil
		}})
	}
	for _, sync := range o.denseSync {
		arms = append(arms, arm{name: "dense_sync " + sync, run: func(ctx context.Context) (*outcome, error) {
			return distribute(ctx, cat, jobTOML(n, batch, o.steps, limit, sync), n)
		}})
	}
	return arms
}

// hasLimit says whether an n-node block of batch has a loopback limit: two
// nodes or more, each with a row.
func hasLimit(n, batch int) bool { return n >= 2 && batch/n >= 1 }

// nodesBlock runs arms (nodeArms) o.repeats rounds, prints the single
// process, the loopback limit and each job against them, and returns the
// jobs' per-stage lines.
func nodesBlock(ctx context.Context, o options, arms []arm, n, batch int, unitName string, limit float64, w io.Writer) ([]string, error) {
	runs, err := alternate(ctx, o.repeats, o.timeout, arms)
	if err != nil {
		return nil, err
	}
	ref, jobs := runs[0], runs[1:]
	fmt.Fprintf(w, "%d nodes: beside them, in the same rounds, %s: %8.0f samples/s (best of %s)\n", n, arms[0].name, ref.best.samplesPerS, ref.rates())
	limitRate := 0.0
	if hasLimit(n, batch) {
		lim := jobs[0]
		jobs = jobs[1:]
		limitRate = lim.best.samplesPerS
		fmt.Fprintf(w, "%d nodes: loopback limit, %d unsynchronised trainers in this process, each on its share of the batch: %8.0f samples/s together (best of %s)\n",
			n, n, limitRate, lim.rates())
	}
	var stageLines []string
	for i, sync := range o.denseSync {
		res := jobs[i].best
		res.limit = limit
		overJob := float64(res.steps) * float64(batch) / res.jobSeconds
		fmt.Fprintf(w, "%d nodes (%dx %s), dense_sync %-9s plan limit %.0f: %8.0f samples/s measured (best of %s), %8.0f over the job (incl. start), %.2fx the single process beside it (%.2fx: the median of the rounds' ratios)%s, loss %.4f, run took %.1f s\n",
			n, n, unitName, sync+",", res.limit, res.samplesPerS, jobs[i].rates(), overJob, res.samplesPerS/ref.best.samplesPerS,
			roundsRatio(jobs[i].all, ref.all), ofLimit(res.samplesPerS, limitRate), res.loss, res.wallSeconds)
		for _, st := range res.stages {
			stageLines = append(stageLines, fmt.Sprintf("%5d  %-9s  %-9s  %5d  %-7s %5d  %10.0f  %10.0f  %6.3f",
				n, sync, st.DenseSync, st.Stage, st.Type, st.Units, st.PredictedThroughput, st.MeasuredThroughput, st.MeasuredThroughput/st.PredictedThroughput))
		}
	}
	return stageLines, nil
}
