package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestExampleCatalogsParse(t *testing.T) {
	files, err := filepath.Glob("examples/catalogs/*.toml")
	if err != nil || len(files) < 3 {
		t.Fatalf("want grid5000, cloud and local catalogs, got %v (%v)", files, err)
	}
	for _, f := range files {
		c, err := LoadCatalog(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, ty := range c.Types {
			if d := ty.Device(); d.PeakFLOPS <= 0 || d.MemBandwidth <= 0 || d.LinkBandwidth <= 0 {
				t.Errorf("%s: type %s has no device descriptor", f, ty.Name)
			}
		}
	}
}

func TestGrid5000CatalogHasTheAcceleratorsOfTheIssue(t *testing.T) {
	c, err := LoadCatalog("examples/catalogs/grid5000.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"p100", "v100", "t4", "a100"} {
		ty, ok := c.Type(name)
		if !ok || ty.Kind != KindGPU {
			t.Errorf("missing GPU type %s", name)
		}
	}
	cpu := 0
	for _, ty := range c.Types {
		if ty.Kind == KindCPU {
			cpu++
		}
	}
	if cpu == 0 || len(c.Nodes) == 0 {
		t.Errorf("want Xeon core types and nodes, got %d CPU types and %d nodes", cpu, len(c.Nodes))
	}
}

const goodCatalog = `version = 1
[[type]]
name = "cpu"
kind = "cpu"
price = 0.04
max_units = 64
peak_flops = 1e11
mem_bandwidth = 8e9
link_bandwidth = 1e9

[[node]]
name = "n1"
address = "n1.example:7070"
units = { cpu = 32 }
`

func TestBadCatalogsNameLineAndField(t *testing.T) {
	cases := []struct {
		name, old, new string
		line           int
		field, msg     string
	}{
		{"unknown kind", `kind = "cpu"`, `kind = "fpga"`, 4, "type[0].kind", "unknown kind"},
		{"no peak", "peak_flops = 1e11", "peak_flops = 0.0", 7, "type[0].peak_flops", "must be > 0"},
		{"unknown node type", "units = { cpu = 32 }", "units = { gpu = 2 }", 14, "node[0].units", `unknown type "gpu"`},
		{"zero node units", "units = { cpu = 32 }", "units = { cpu = 0 }", 14, "node[0].units", "must be > 0"},
		{"bad address", `address = "n1.example:7070"`, `address = "n1.example"`, 13, "node[0].address", "host:port"},
		{"negative price", "price = 0.04", "price = -1.0", 5, "type[0].price", ">= 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(goodCatalog, c.old, c.new, 1)
			_, err := ParseCatalog("c.toml", []byte(src))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("want *Error, got %v", err)
			}
			if ce.Line != c.line || ce.Field != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got line %d field %q: %v; want line %d field %q containing %q", ce.Line, ce.Field, err, c.line, c.field, c.msg)
			}
		})
	}
}

func TestCatalogMarshalRoundTrips(t *testing.T) {
	c, err := ParseCatalog("c.toml", []byte(goodCatalog))
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseCatalog("out.toml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if d.Nodes[0].Units["cpu"] != 32 || d.Types[0].PeakFLOPS != 1e11 {
		t.Fatalf("round trip changed the catalog:\n%s", out)
	}
}

// TestGrid5000CatalogMatchesTheReferenceRepository pins what was checked
// against Grid'5000's reference repository: NVLink bandwidths one way, and
// chifflot-7/8's two V100-PCIE-32GB each as a type of their own.
func TestGrid5000CatalogMatchesTheReferenceRepository(t *testing.T) {
	c, err := LoadCatalog("grid5000")
	if err != nil {
		t.Fatal(err)
	}
	link := map[string]float64{"v100": 1.5e11, "a100": 3.0e11, "p100": 1.575e10, "v100-pcie": 1.575e10, "t4": 1.575e10}
	for name, want := range link {
		ty, ok := c.Type(name)
		if !ok || ty.Device().LinkBandwidth != want {
			t.Errorf("type %s: link bandwidth %g, want %g (one way)", name, ty.Device().LinkBandwidth, want)
		}
	}
	units := map[string]map[string]int{}
	for _, n := range c.Nodes {
		units[n.Name] = n.Units
	}
	if units["chifflot-7"]["v100-pcie"] != 2 || units["gemini-1"]["v100"] != 8 || units["chuc-1"]["a100"] != 4 ||
		units["grue-1"]["t4"] != 4 || units["chifflot-1"]["p100"] != 2 {
		t.Errorf("GPU counts per node: %v", units)
	}
}
