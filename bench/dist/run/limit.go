package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/native"
)

// unsynced trains n nn.Trainers at once, each with its own model, data
// stream and backend of threads threads, on rows-row batches for steps
// steps, and returns the samples/s they reach together while all of them
// run: what n data-parallel replicas would train on this machine if they
// never synchronised. One-thread trainers run pinned to the CPUs dealt in
// turn, as `heterps run` deals them to its one-thread node daemons:
// unpinned, two of them reached only 56k samples/s on the Zen 4 VM (two
// pinned `heterps train` processes 79k, these two pinned 73k), and the
// jobs were held against that lower figure.
func unsynced(ctx context.Context, model *config.Model, n, threads, rows, steps int) (float64, error) {
	ends := make([][]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer pinTrainer(i, threads)()
			ends[i], errs[i] = trainTimed(ctx, model, uint64(i)+1, threads, rows, steps)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return togetherRate(ends, rows)
}

// pinTrainer pins the calling goroutine's thread as unsynced pins trainer
// i of threads threads, and returns what undoes it: a one-thread trainer
// to the i-th of the allowed CPUs, round again when the trainers
// outnumber them (cpuset.LockToCPU), as heterps run deals CPUs to
// one-thread daemons; trainers of more threads not at all, as their
// backends pin themselves when they fill the machine.
func pinTrainer(i, threads int) (unpin func()) {
	if threads != 1 {
		return func() {}
	}
	return cpuset.LockToCPU(i)
}

// trainTimed trains one model on rows-row batches for steps steps and
// returns when each step ended, its threads pinned as heterps train pins
// them (native.PinAuto: when they are every CPU the process may use).
func trainTimed(ctx context.Context, model *config.Model, seed uint64, threads, rows, steps int) ([]time.Time, error) {
	backend, err := native.NewCPU(native.CPUOptions{Threads: threads, Pin: native.PinAuto})
	if err != nil {
		return nil, err
	}
	defer backend.PinCaller()() // as heterps train runs its steps
	tr, src, err := benchTrainer(backend, model, seed, int64(steps))
	if err != nil {
		return nil, err
	}
	defer src.Close()
	batches, err := data.PrefetchBatches(ctx, src, rows, 2, steps)
	if err != nil {
		return nil, err
	}
	defer batches.Close() // before src.Close
	ends := make([]time.Time, 0, steps)
	for i := range steps {
		b, err := batches.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("batch %d: %w", i, err)
		}
		if _, err := tr.Step(b); err != nil {
			return nil, err
		}
		ends = append(ends, time.Now())
	}
	return ends, nil
}

// togetherRate is the samples/s of rows-row steps that several trainers
// ended (ends[i]) while every one of them ran, each past its first step:
// from the last first step's end to the first last step's end.
func togetherRate(ends [][]time.Time, rows int) (float64, error) {
	var from, to time.Time
	for i, e := range ends {
		if len(e) < 2 {
			return 0, fmt.Errorf("trainer %d ended %d steps, want 2 or more", i, len(e))
		}
		if i == 0 || e[0].After(from) {
			from = e[0]
		}
		if last := e[len(e)-1]; i == 0 || last.Before(to) {
			to = last
		}
	}
	if !to.After(from) {
		return 0, fmt.Errorf("the trainers never ran together (one ended before another's first step)")
	}
	steps := 0
	for _, e := range ends {
		for _, t := range e {
			if t.After(from) && !t.After(to) {
				steps++
			}
		}
	}
	return float64(steps*rows) / to.Sub(from).Seconds(), nil
}
