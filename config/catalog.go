package config

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"

	"github.com/pelletier/go-toml/v2"
)

// Catalog is a resource catalog: the types of unit a cluster or cloud offers
// (CPU cores, GPUs of one model), what a unit costs and how many there are,
// a device descriptor per type for estimating layer times where no profile
// exists, and the nodes the coordinator can place stages on.
type Catalog struct {
	Version int    `toml:"version,omitempty"`
	Name    string `toml:"name,omitempty"`
	// EmulateGPUs lets nodes without GPUs offer the catalog's GPU types
	// (their stages train on the CPU): for tests and CPU-only emulations
	// of a heterogeneous cluster, whose types are labels. Without it the
	// coordinator refuses a node of a GPU type that lacks the GPUs.
	EmulateGPUs bool          `toml:"emulate_gpus,omitempty"`
	Types       []CatalogType `toml:"type"`
	Nodes       []CatalogNode `toml:"node,omitempty"`
}

// CatalogType is one resource type. A unit is one CPU core or one GPU.
type CatalogType struct {
	Name     string  `toml:"name"`
	Kind     string  `toml:"kind"`            // "cpu" or "gpu"
	Model    string  `toml:"model,omitempty"` // the hardware, for people
	Price    float64 `toml:"price"`           // per unit-hour
	MaxUnits int     `toml:"max_units"`
	// Device descriptor, per unit.
	PeakFLOPS     float64 `toml:"peak_flops"`     // FP32 FLOP/s
	MemBandwidth  float64 `toml:"mem_bandwidth"`  // bytes/s to the unit's own memory
	LinkBandwidth float64 `toml:"link_bandwidth"` // bytes/s to other units (PCIe, NVLink, NIC share)
}

// Device is what the roofline estimate needs of a unit.
type Device struct {
	PeakFLOPS     float64
	MemBandwidth  float64
	LinkBandwidth float64
}

// Device returns t's device descriptor.
func (t CatalogType) Device() Device {
	return Device{PeakFLOPS: t.PeakFLOPS, MemBandwidth: t.MemBandwidth, LinkBandwidth: t.LinkBandwidth}
}

// CatalogNode is a machine a node daemon runs on and the units it offers,
// per type name (a GPU server offers both GPUs and CPU cores).
type CatalogNode struct {
	Name    string         `toml:"name"`
	Address string         `toml:"address"` // host:port of its node daemon
	Units   map[string]int `toml:"units,inline"`
}

// LoadCatalog reads, decodes and validates a catalog file.
func LoadCatalog(path string) (*Catalog, error) {
	name, src, err := readNamedOrFile(ExampleCatalogs, path)
	if err != nil {
		return nil, err
	}
	return ParseCatalog(name, src)
}

// ParseCatalog decodes and validates a catalog file's contents.
func ParseCatalog(name string, src []byte) (*Catalog, error) {
	var c Catalog
	if err := Decode(name, src, &c); err != nil {
		return nil, err
	}
	if err := c.validate(NewLocator(name, src)); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks a catalog built in code.
func (c *Catalog) Validate() error { return c.validate(NewLocator("catalog", nil)) }

// MarshalTOML writes c as a catalog file.
func (c *Catalog) MarshalTOML() ([]byte, error) { return toml.Marshal(c) }

// Type returns the type named name.
func (c *Catalog) Type(name string) (CatalogType, bool) {
	for _, t := range c.Types {
		if t.Name == name {
			return t, true
		}
	}
	return CatalogType{}, false
}

func (c *Catalog) validate(loc *Locator) error {
	var errs errorList
	if c.Version != 0 && c.Version != 1 {
		errs.add(loc.Errorf("version", "unsupported version %d (this heterps reads version 1)", c.Version))
	}
	if len(c.Types) == 0 {
		errs.add(loc.Errorf("type", "a catalog needs at least one [[type]]"))
	}
	types := map[string]bool{}
	for i, t := range c.Types {
		at := fmt.Sprintf("type[%d]", i)
		switch {
		case !identifier.MatchString(t.Name):
			errs.add(loc.Errorf(at+".name", "%q is not a type name (letters, digits, '.', '_' and '-')", t.Name))
		case types[t.Name]:
			errs.add(loc.Errorf(at+".name", "duplicate type name %q", t.Name))
		}
		types[t.Name] = true
		t.validate(loc, at, &errs)
	}
	nodes := map[string]bool{}
	for i, n := range c.Nodes {
		at := fmt.Sprintf("node[%d]", i)
		if nodes[n.Name] {
			errs.add(loc.Errorf(at+".name", "duplicate node name %q", n.Name))
		}
		nodes[n.Name] = true
		n.validate(loc, at, types, &errs)
	}
	return errs.err()
}

func (t CatalogType) validate(loc *Locator, at string, errs *errorList) {
	if t.Kind != KindCPU && t.Kind != KindGPU {
		errs.add(loc.Errorf(at+".kind", "unknown kind %q (want cpu or gpu)", t.Kind))
	}
	if !finite(t.Price) || t.Price < 0 {
		errs.add(loc.Errorf(at+".price", "must be a finite number >= 0, got %g", t.Price))
	}
	if t.MaxUnits <= 0 {
		errs.add(loc.Errorf(at+".max_units", "must be > 0, got %d", t.MaxUnits))
	}
	for _, f := range []struct {
		key string
		v   float64
	}{{"peak_flops", t.PeakFLOPS}, {"mem_bandwidth", t.MemBandwidth}, {"link_bandwidth", t.LinkBandwidth}} {
		if !finite(f.v) || f.v <= 0 {
			errs.add(loc.Errorf(at+"."+f.key, "must be > 0, got %g", f.v))
		}
	}
}

func (n CatalogNode) validate(loc *Locator, at string, types map[string]bool, errs *errorList) {
	if !identifier.MatchString(n.Name) {
		errs.add(loc.Errorf(at+".name", "%q is not a node name", n.Name))
	}
	if len(n.Units) == 0 {
		errs.add(loc.Errorf(at+".units", "a node must offer units of at least one type"))
	}
	for _, name := range slices.Sorted(maps.Keys(n.Units)) {
		switch {
		case !types[name]:
			errs.add(loc.Errorf(at+".units", "unknown type %q", name))
		case n.Units[name] <= 0:
			errs.add(loc.Errorf(at+".units", "%s: must be > 0, got %d", name, n.Units[name]))
		}
	}
	host, port, err := net.SplitHostPort(n.Address)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil || host == "" {
		errs.add(loc.Errorf(at+".address", "want host:port, got %q", n.Address))
	}
}
