// Package planlimit picks the throughput floor that makes the scheduler
// plan a benchmark's job on a given number of units.
package planlimit

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/sched"
)

// For finds a throughput floor at which the exact plan of a job of
// model (named modelName, on dataSpec) uses exactly n units of cat
// (bisection on a log scale: more units for a higher floor), so that a
// benchmark can ask for a one-stage plan on n nodes.
func For(ctx context.Context, cat *config.Catalog, model *config.Model, modelName, dataSpec string, n, batch, steps int) (float64, error) {
	units := func(limit float64) (int, error) {
		jf, err := config.ParseJob("bench.toml", fmt.Appendf(nil,
			"version = 1\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\n",
			modelName, dataSpec, batch, steps, limit))
		if err != nil {
			return 0, err
		}
		p, err := coord.JobProblem(jf, model, cat)
		if err != nil {
			return 0, err
		}
		plan, err := sched.Run(ctx, "exact", p, sched.Options{Seed: 1})
		if err != nil {
			return 0, err
		}
		if !plan.Feasible {
			return math.MaxInt, nil
		}
		total := 0
		for _, s := range plan.Stages {
			total += s.Units
		}
		return total, nil
	}
	return Bisect(n, units)
}

// ErrNoFloor says that no throughput floor gives a plan of exactly the
// units asked for (the plan jumps past n, or more units are no faster).
var ErrNoFloor = errors.New("no throughput floor makes the exact plan use exactly this many units")

// Bisect finds a floor in [1, 1e9] samples/s at which units(floor), the
// units of the plan for that floor (non-decreasing in it; math.MaxInt when
// infeasible), is exactly n, bisecting on a log scale.
func Bisect(n int, units func(floor float64) (int, error)) (float64, error) {
	lo, hi := 1.0, 1e9
	for range 200 {
		mid := math.Sqrt(lo * hi)
		u, err := units(mid)
		switch {
		case err != nil:
			return 0, err
		case u == n:
			return mid, nil
		case u < n:
			lo = mid
		default:
			hi = mid
		}
	}
	return 0, fmt.Errorf("%w: %d", ErrNoFloor, n)
}
