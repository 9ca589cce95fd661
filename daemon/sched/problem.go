package sched

import (
	"fmt"
	"math"

	"github.com/heterps/heterps/config"
)

// Kind is what a resource type is made of.
type Kind uint8

// Resource kinds.
const (
	CPU Kind = iota
	GPU
)

func (k Kind) String() string {
	if k == CPU {
		return config.KindCPU
	}
	return config.KindGPU
}

// Type is a resource type: units of it cost Price per unit-hour and at most
// MaxUnits of them exist.
type Type struct {
	Name     string
	Kind     Kind
	Price    float64
	MaxUnits int
}

// Layer is one layer's profile, one value per type: OCT and ODT are seconds
// on one unit at the profiling batch size, Alpha and Beta their parallel
// fractions.
type Layer struct {
	Name       string
	Kind       string
	OCT, ODT   []float64
	Alpha      []float64
	Beta       []float64
	InputSize  int64 // floats per sample entering the layer, 0 when unknown
	WeightSize int64 // floats of weights, 0 when unknown
}

// Problem is a scheduling problem as plain runtime values. Methods never
// modify it.
type Problem struct {
	Batch           float64 // B
	ProfileBatch    float64 // B_o
	ThroughputLimit float64 // samples/s; 0 means no floor
	Epochs          float64
	Samples         float64 // M, samples per epoch
	PSType          int     // index of the type paying parameter-server cores, -1 for none
	PSRatio         float64 // ps_cores = ceil(PSRatio * total units)
	Types           []Type
	Layers          []Layer
}

// NewProblem converts a problem file into runtime values, validating it
// first (files from config.LoadProblem already are).
func NewProblem(c *config.Problem) (*Problem, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("sched: problem: %w", err)
	}
	p := &Problem{
		Batch:           float64(c.Batch),
		ProfileBatch:    float64(c.ProfileBatch),
		ThroughputLimit: c.ThroughputLimit,
		Epochs:          c.Epochs,
		Samples:         float64(c.Samples),
		PSType:          -1,
		PSRatio:         c.PSRatio,
	}
	for _, t := range c.Types {
		kind := GPU
		if config.TypeKind(t.Name, t.Kind) == config.KindCPU {
			kind = CPU
		}
		p.Types = append(p.Types, Type{Name: t.Name, Kind: kind, Price: t.Price, MaxUnits: t.MaxUnits})
	}
	if c.PSType != "" {
		p.PSType, _ = p.TypeIndex(c.PSType)
	}
	for _, l := range c.Layers {
		p.Layers = append(p.Layers, Layer{Name: l.Name, Kind: l.Kind, OCT: l.OCT, ODT: l.ODT,
			Alpha: l.Alpha, Beta: l.Beta, InputSize: l.InputSize, WeightSize: l.WeightSize})
	}
	return p, nil
}

// Config converts p back into a problem file.
func (p *Problem) Config() *config.Problem {
	c := &config.Problem{
		Version:         1,
		Batch:           int(p.Batch),
		ProfileBatch:    int(p.ProfileBatch),
		ThroughputLimit: p.ThroughputLimit,
		Epochs:          p.Epochs,
		Samples:         int64(p.Samples),
		PSRatio:         p.PSRatio,
	}
	if p.PSType >= 0 {
		c.PSType = p.Types[p.PSType].Name
	}
	for _, t := range p.Types {
		c.Types = append(c.Types, config.ProblemType{Name: t.Name, Kind: t.Kind.String(), Price: t.Price, MaxUnits: t.MaxUnits})
	}
	for _, l := range p.Layers {
		c.Layers = append(c.Layers, config.ProblemLayer{Name: l.Name, Kind: l.Kind, OCT: l.OCT, ODT: l.ODT,
			Alpha: l.Alpha, Beta: l.Beta, InputSize: l.InputSize, WeightSize: l.WeightSize})
	}
	return c
}

// Validate checks a problem built in code, with the rules of problem files.
func (p *Problem) Validate() error {
	if p.Batch != math.Trunc(p.Batch) || p.ProfileBatch != math.Trunc(p.ProfileBatch) {
		return fmt.Errorf("sched: problem: batch sizes must be integers, got %g and %g", p.Batch, p.ProfileBatch)
	}
	if p.PSType >= len(p.Types) {
		return fmt.Errorf("sched: problem: PS type %d out of range", p.PSType)
	}
	if err := p.Config().Validate(); err != nil {
		return fmt.Errorf("sched: problem: %w", err)
	}
	return nil
}

// TypeIndex returns the index of the type named name.
func (p *Problem) TypeIndex(name string) (int, bool) {
	for i, t := range p.Types {
		if t.Name == name {
			return i, true
		}
	}
	return -1, false
}

// PSPrice is the price of one parameter-server core per hour (0 without a
// PS type).
func (p *Problem) PSPrice() float64 {
	if p.PSType < 0 {
		return 0
	}
	return p.Types[p.PSType].Price
}

// PSTypeName is the name of the PS type, "" for none.
func (p *Problem) PSTypeName() string {
	if p.PSType < 0 {
		return ""
	}
	return p.Types[p.PSType].Name
}
