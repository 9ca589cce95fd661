package coord

import (
	"fmt"
	"slices"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/sched"
)

// Planning on a measured profile. A job file's `profile` names a problem
// file that `heterps profile` wrote for the job's model on this kind of
// machine: per layer and type, oct/odt/alpha/beta measured with the
// synchronisation the runtime does folded in. The coordinator plans such a
// job on it instead of the catalog's roofline estimates: the problem is
// built from the live catalog as always (prices, units, batch, length,
// throughput floor, parameter-server cores), then every type's layer
// columns are replaced by the profile's columns of the type of the same
// name, and B_o by the profile's. A type the live nodes offer that the
// profile lacks is an error naming both, not a silent fall-back to the
// roofline: the stages' measured/predicted ratios would then mean nothing.
//
// The file is read at every planning (and by the re-planner for its
// uncorrected predictions), so it must stay where the coordinator can
// read it while the job runs; submission checks that it loads and has the
// model's layer count.

// loadProfile reads the job's profile and checks it against the model's
// layers; estimated are the types its header marks as roofline estimates.
func loadProfile(jf *config.Job, layers int) (pf *config.Problem, estimated []string, err error) {
	pf, estimated, err = config.LoadProfile(jf.Profile)
	if err != nil {
		return nil, nil, fmt.Errorf("profile: %w", err)
	}
	if len(pf.Layers) != layers {
		return nil, nil, fmt.Errorf("profile %s has %d layers, model %s plans %d: profile this model (heterps profile --model %s)",
			jf.Profile, len(pf.Layers), jf.Model, layers, jf.Model)
	}
	return pf, estimated, nil
}

// applyProfile replaces p's layer times on every type by the profile's
// measured ones for the type of the same name, and B_o by the profile's.
func applyProfile(p, pf *config.Problem, path string) error {
	names := make([]string, len(pf.Types))
	for i, t := range pf.Types {
		names[i] = t.Name
	}
	for t, typ := range p.Types {
		col := slices.Index(names, typ.Name)
		if col < 0 {
			return fmt.Errorf("profile %s has no type %s, which the live nodes offer (it has %v): profile it with heterps profile --type %s",
				path, typ.Name, names, typ.Name)
		}
		for l := range p.Layers {
			m := pf.Layers[l]
			p.Layers[l].OCT[t], p.Layers[l].ODT[t] = m.OCT[col], m.ODT[col]
			p.Layers[l].Alpha[t], p.Layers[l].Beta[t] = m.Alpha[col], m.Beta[col]
		}
		p.Types[t].DenseSync = pf.Types[col].DenseSync
	}
	p.ProfileBatch = pf.ProfileBatch
	return nil
}

// onlyTypes is cat restricted to the named types.
func onlyTypes(cat *config.Catalog, names []string) *config.Catalog {
	out := &config.Catalog{Version: cat.Version, Name: cat.Name, Nodes: cat.Nodes}
	for _, t := range cat.Types {
		if slices.Contains(names, t.Name) {
			out.Types = append(out.Types, t)
		}
	}
	return out
}

// planTypes is the types the stages of plan run on.
func planTypes(plan *sched.Plan) []string {
	var out []string
	for _, s := range plan.Stages {
		if !slices.Contains(out, s.Type) {
			out = append(out, s.Type)
		}
	}
	return out
}
