package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Problem is a scheduling problem file: a batch size, a throughput floor, the
// resource types with their prices and unit limits, and per layer the
// profiled times on one unit of each type (see the cost model in DESIGN.md).
// `heterps plan --problem FILE` reads it, so anyone can pose a problem with
// their own numbers.
type Problem struct {
	Version         int            `toml:"version,omitempty"`
	Batch           int            `toml:"batch"`            // B, samples per training batch
	ProfileBatch    int            `toml:"profile_batch"`    // B_o, the batch size the times were profiled at
	ThroughputLimit float64        `toml:"throughput_limit"` // samples/s the pipeline must reach; 0 = no floor
	Epochs          float64        `toml:"epochs"`
	Samples         int64          `toml:"samples"`            // M, samples per epoch
	PSType          string         `toml:"ps_type,omitempty"`  // type whose price pays parameter-server cores
	PSRatio         float64        `toml:"ps_ratio,omitempty"` // ps_cores = ceil(ps_ratio * total units)
	Types           []ProblemType  `toml:"type"`
	Layers          []ProblemLayer `toml:"layer"`
}

// ProblemType is one resource type of a problem.
type ProblemType struct {
	Name     string  `toml:"name"`
	Kind     string  `toml:"kind,omitempty"` // "cpu" or "gpu"; see TypeKind for the default
	Price    float64 `toml:"price"`          // per unit-hour
	MaxUnits int     `toml:"max_units"`
	// DenseSync is the dense_sync ("ps" or "allreduce") whose
	// synchronisation heterps profile measured and folded into this type's
	// times; empty when none was. A job with dense_sync = "auto" planned on
	// these times syncs that way.
	DenseSync string `toml:"dense_sync,omitempty"`
}

// ProblemLayer is one layer's profile: one value per [[type]], in order.
type ProblemLayer struct {
	Name string    `toml:"name"`
	Kind string    `toml:"kind"`
	OCT  []float64 `toml:"oct"` // seconds of forward+backward on one unit at profile_batch
	ODT  []float64 `toml:"odt"` // seconds to exchange the output activations and their gradients
	// Alpha is the parallelisable fraction of oct (Amdahl): one unit's
	// time is split into (1-alpha)·oct that k units each spend and
	// alpha·oct that they share. Below 0 (down to MinAlpha), more units
	// slow the layer down, to (1-alpha)·oct at the most: synchronisation
	// that grows with the replicas, as a profile measures it on machines
	// whose nodes share cores.
	Alpha []float64 `toml:"alpha"`
	Beta  []float64 `toml:"beta"` // parallelisable fraction of odt
	// Sizes, optional features for learned schedulers: floats per sample
	// entering the layer and floats of weights.
	InputSize  int64 `toml:"input_size,omitempty"`
	WeightSize int64 `toml:"weight_size,omitempty"`
}

// Resource kinds.
const (
	KindCPU = "cpu"
	KindGPU = "gpu"
)

// TypeKind is a type's kind: kind when set, otherwise "cpu" for names that
// start with "cpu" and "gpu" for every other name.
func TypeKind(name, kind string) string {
	if kind != "" {
		return kind
	}
	if strings.HasPrefix(strings.ToLower(name), KindCPU) {
		return KindCPU
	}
	return KindGPU
}

// LoadProblem reads, decodes and validates a problem file.
func LoadProblem(path string) (*Problem, error) {
	name, src, err := readNamedOrFile(ExampleProblems, path)
	if err != nil {
		return nil, err
	}
	return ParseProblem(name, src)
}

// ProfileEstimatedPrefix starts the header line of a `heterps profile`
// file that names the types whose columns are roofline estimates from the
// catalog's device descriptors, not measurements.
const ProfileEstimatedPrefix = "# estimated from device descriptors (roofline), not measured: "

// LoadProfile reads a problem file written by `heterps profile`: the
// problem, and the types its header marks as estimated rather than
// measured (none for a file without that line, such as a hand-written one).
func LoadProfile(path string) (*Problem, []string, error) {
	name, src, err := readNamedOrFile(ExampleProblems, path)
	if err != nil {
		return nil, nil, err
	}
	p, err := ParseProblem(name, src)
	if err != nil {
		return nil, nil, err
	}
	return p, EstimatedTypes(src), nil
}

// EstimatedTypes returns the types a profile's header (its leading comment
// lines) marks as estimated (ProfileEstimatedPrefix).
func EstimatedTypes(src []byte) []string {
	var out []string
	for line := range strings.Lines(string(src)) {
		if !strings.HasPrefix(line, "#") {
			break
		}
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), ProfileEstimatedPrefix)
		if !ok {
			continue
		}
		for _, name := range strings.Split(rest, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out = append(out, name)
			}
		}
	}
	return out
}

// ParseProblem decodes and validates a problem file's contents, named name
// in errors.
func ParseProblem(name string, src []byte) (*Problem, error) {
	var p Problem
	if err := Decode(name, src, &p); err != nil {
		return nil, err
	}
	if err := p.validate(NewLocator(name, src)); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks a problem built in code (errors carry field names but no
// lines).
func (p *Problem) Validate() error { return p.validate(NewLocator("problem", nil)) }

// MarshalTOML writes p as a problem file.
func (p *Problem) MarshalTOML() ([]byte, error) { return toml.Marshal(p) }

// maxReported caps how many validation errors one call returns.
const maxReported = 20

// errorList collects validation errors up to maxReported.
type errorList []error

func (l *errorList) add(e *Error) {
	if len(*l) < maxReported {
		*l = append(*l, e)
	}
}

func (l errorList) err() error { return errors.Join(l...) }

func (p *Problem) validate(loc *Locator) error {
	var errs errorList
	p.validateScalars(loc, &errs)
	names := p.validateTypes(loc, &errs)
	p.validatePS(loc, names, &errs)
	if len(p.Layers) == 0 {
		errs.add(loc.Errorf("layer", "a problem needs at least one [[layer]]"))
	}
	for i := range p.Layers {
		p.Layers[i].validate(loc, fmt.Sprintf("layer[%d]", i), p.Types, &errs)
	}
	return errs.err()
}

func (p *Problem) validateScalars(loc *Locator, errs *errorList) {
	if p.Version != 0 && p.Version != 1 {
		errs.add(loc.Errorf("version", "unsupported version %d (this heterps reads version 1)", p.Version))
	}
	if p.Batch <= 0 {
		errs.add(loc.Errorf("batch", "must be > 0, got %d", p.Batch))
	}
	if p.ProfileBatch <= 0 {
		errs.add(loc.Errorf("profile_batch", "must be > 0, got %d", p.ProfileBatch))
	}
	if !finite(p.ThroughputLimit) || p.ThroughputLimit < 0 {
		errs.add(loc.Errorf("throughput_limit", "must be a finite number >= 0, got %g", p.ThroughputLimit))
	}
	if !finite(p.Epochs) || p.Epochs <= 0 {
		errs.add(loc.Errorf("epochs", "must be > 0, got %g", p.Epochs))
	}
	if p.Samples <= 0 {
		errs.add(loc.Errorf("samples", "must be > 0, got %d", p.Samples))
	}
}

// validateTypes checks the [[type]] entries and returns the set of names.
func (p *Problem) validateTypes(loc *Locator, errs *errorList) map[string]bool {
	names := map[string]bool{}
	if len(p.Types) == 0 {
		errs.add(loc.Errorf("type", "a problem needs at least one [[type]]"))
	}
	for i, t := range p.Types {
		at := fmt.Sprintf("type[%d]", i)
		switch {
		case !identifier.MatchString(t.Name):
			errs.add(loc.Errorf(at+".name", "%q is not a type name (letters, digits, '.', '_' and '-')", t.Name))
		case names[t.Name]:
			errs.add(loc.Errorf(at+".name", "duplicate type name %q", t.Name))
		}
		names[t.Name] = true
		if t.Kind != "" && t.Kind != KindCPU && t.Kind != KindGPU {
			errs.add(loc.Errorf(at+".kind", "unknown kind %q (want cpu or gpu)", t.Kind))
		}
		if !finite(t.Price) || t.Price < 0 {
			errs.add(loc.Errorf(at+".price", "must be a finite number >= 0, got %g", t.Price))
		}
		if t.MaxUnits <= 0 {
			errs.add(loc.Errorf(at+".max_units", "must be > 0, got %d", t.MaxUnits))
		}
		if t.DenseSync != "" && t.DenseSync != DenseSyncPS && t.DenseSync != DenseSyncAllreduce {
			errs.add(loc.Errorf(at+".dense_sync", "unknown method %q (want ps or allreduce)", t.DenseSync))
		}
	}
	return names
}

func (p *Problem) validatePS(loc *Locator, names map[string]bool, errs *errorList) {
	if !finite(p.PSRatio) || p.PSRatio < 0 {
		errs.add(loc.Errorf("ps_ratio", "must be a finite number >= 0, got %g", p.PSRatio))
	}
	switch {
	case p.PSType != "" && !names[p.PSType]:
		errs.add(loc.Errorf("ps_type", "unknown type %q (want one of the [[type]] names: %s)", p.PSType, p.typeNames()))
	case p.PSType == "" && p.PSRatio > 0:
		errs.add(loc.Errorf("ps_ratio", "is %g but no ps_type says which type's price pays the parameter-server cores", p.PSRatio))
	}
}

func (p *Problem) typeNames() string {
	names := make([]string, len(p.Types))
	for i, t := range p.Types {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

func (l *ProblemLayer) validate(loc *Locator, at string, types []ProblemType, errs *errorList) {
	if l.Name == "" {
		errs.add(loc.Errorf(at+".name", "missing"))
	}
	if l.Kind != "" && !identifier.MatchString(l.Kind) {
		errs.add(loc.Errorf(at+".kind", "%q is not a layer kind", l.Kind))
	}
	if l.InputSize < 0 || l.WeightSize < 0 {
		errs.add(loc.Errorf(at+".input_size", "sizes must be >= 0, got input_size %d and weight_size %d", l.InputSize, l.WeightSize))
	}
	checks := []struct {
		key    string
		values []float64
		ok     func(float64) bool
		want   string
	}{
		{"oct", l.OCT, func(v float64) bool { return v > 0 }, "> 0 seconds"},
		{"odt", l.ODT, func(v float64) bool { return v >= 0 }, ">= 0 seconds"},
		{"alpha", l.Alpha, func(v float64) bool { return v >= MinAlpha && v <= 1 }, fmt.Sprintf("in [%g, 1]", MinAlpha)},
		{"beta", l.Beta, func(v float64) bool { return v >= 0 && v <= 1 }, "in [0, 1]"},
	}
	for _, c := range checks {
		if len(c.values) != len(types) {
			errs.add(loc.Errorf(at+"."+c.key, "has %d values, want one per [[type]] (%d)", len(c.values), len(types)))
			continue
		}
		for j, v := range c.values {
			if !finite(v) || !c.ok(v) {
				errs.add(loc.Errorf(at+"."+c.key, "value %d (type %q) is %g, want %s", j, types[j].Name, v, c.want))
			}
		}
	}
}

var identifier = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._\-]*$`)

// MinAlpha bounds a layer's alpha from below: a stage that many units make
// at most 11 times slower than one.
const MinAlpha = -10.0

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
