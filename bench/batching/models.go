package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// modelSpec is one workload of the benchmark: a zoo model, its data and
// how long it trains.
type modelSpec struct {
	name, data   string
	batch, steps int
	loss         string // what the status's loss is, for the tables
}

// The paper's three workload classes: ctrdnn (compute-bound here),
// mlp-digits (small) and linreg (tiny: communication-bound). The default
// steps keep the default full run (3 models x BSP, ASP x 4 H-levels x 3
// modes, interference and resize) near 12 minutes on 2 cores: each H-1
// run takes 5-15 s, a few of the dynamic controller's adjustments (one
// per 3 heartbeats); --steps lengthens every run.
var (
	modelNames = []string{"ctrdnn", "mlp-digits", "linreg"}
	models     = map[string]modelSpec{
		"ctrdnn":     {name: "ctrdnn", data: "synthetic:1", batch: 1024, steps: 100, loss: "log loss"},
		"mlp-digits": {name: "mlp-digits", data: "digits:", batch: 1024, steps: 150, loss: "cross-entropy"},
		"linreg":     {name: "linreg", data: "regress:1", batch: 256, steps: 400, loss: "MSE"},
	}
)

// modelDefaults lists each model's default of field (steps or batch), for
// the flags' help.
func modelDefaults(field string) string {
	var parts []string
	for _, n := range modelNames {
		v := models[n].steps
		if field == "batch" {
			v = models[n].batch
		}
		parts = append(parts, fmt.Sprintf("%s %d", n, v))
	}
	return strings.Join(parts, ", ")
}

// pickModels is the specs of names, with steps and batch when they are
// set (> 0) and the digits CSV's absolute path: the node daemons open it.
func pickModels(names []string, digits string, steps, batch int) ([]modelSpec, error) {
	var out []modelSpec
	for _, n := range names {
		m := models[n]
		if m.data == "digits:" {
			abs, err := filepath.Abs(digits)
			if err == nil {
				_, err = os.Stat(abs)
			}
			if err != nil {
				return nil, fmt.Errorf("--digits: %w", err)
			}
			m.data += abs
		}
		if steps > 0 {
			m.steps = steps
		}
		if batch > 0 {
			m.batch = batch
		}
		out = append(out, m)
	}
	return out, nil
}
