package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestExampleProblemsParse(t *testing.T) {
	files, err := filepath.Glob("examples/problems/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example problems: %v", err)
	}
	for _, f := range files {
		p, err := LoadProblem(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(p.Types) == 0 || len(p.Layers) == 0 {
			t.Errorf("%s: empty problem", f)
		}
	}
}

const goodProblem = `batch = 4096
profile_batch = 256
throughput_limit = 50000
epochs = 1
samples = 100000000
ps_type = "cpu"
ps_ratio = 0.1

[[type]]
name = "cpu"
price = 0.04
max_units = 512

[[type]]
name = "v100"
price = 2.48
max_units = 16

[[layer]]
name = "emb"
kind = "embedding"
oct = [0.010, 0.020]
odt = [0.002, 0.001]
alpha = [0.95, 0.9]
beta = [0.9, 0.9]
`

func TestParseProblemReadsEveryField(t *testing.T) {
	p, err := ParseProblem("p.toml", []byte(goodProblem))
	if err != nil {
		t.Fatal(err)
	}
	if p.Batch != 4096 || p.ProfileBatch != 256 || p.ThroughputLimit != 50000 || p.Epochs != 1 ||
		p.Samples != 100000000 || p.PSType != "cpu" || p.PSRatio != 0.1 {
		t.Fatalf("scalars: %+v", p)
	}
	if p.Types[1].Name != "v100" || p.Types[1].Price != 2.48 || p.Types[1].MaxUnits != 16 {
		t.Fatalf("types: %+v", p.Types)
	}
	l := p.Layers[0]
	if l.Name != "emb" || l.Kind != "embedding" || l.OCT[1] != 0.020 || l.ODT[0] != 0.002 || l.Alpha[1] != 0.9 || l.Beta[0] != 0.9 {
		t.Fatalf("layer: %+v", l)
	}
}

func TestTypeKindDefault(t *testing.T) {
	cases := []struct{ name, kind, want string }{
		{"cpu", "", KindCPU}, {"CPU-xeon", "", KindCPU}, {"v100", "", KindGPU}, {"xeon", "cpu", KindCPU}, {"cpu", "gpu", KindGPU},
	}
	for _, c := range cases {
		if got := TypeKind(c.name, c.kind); got != c.want {
			t.Errorf("TypeKind(%q, %q) = %q, want %q", c.name, c.kind, got, c.want)
		}
	}
}

// TestBadProblemsNameLineAndField edits one line of goodProblem at a time and
// checks that the error points at that line and names the field.
func TestBadProblemsNameLineAndField(t *testing.T) {
	cases := []struct {
		name, old, new string
		line           int
		field, msg     string
	}{
		{"wrong array length", "odt = [0.002, 0.001]", "odt = [0.002]", 23, "layer[0].odt", "has 1 values"},
		{"negative time", "oct = [0.010, 0.020]", "oct = [0.010, -0.020]", 22, "layer[0].oct", `type "v100"`},
		{"zero compute time", "oct = [0.010, 0.020]", "oct = [0.0, 0.020]", 22, "layer[0].oct", "want > 0"},
		{"alpha above 1", "alpha = [0.95, 0.9]", "alpha = [1.5, 0.9]", 24, "layer[0].alpha", "in [-10, 1]"},
		{"alpha below its floor", "alpha = [0.95, 0.9]", "alpha = [0.95, -10.5]", 24, "layer[0].alpha", `type "v100") is -10.5, want in [-10, 1]`},
		{"beta below 0", "beta = [0.9, 0.9]", "beta = [0.9, -0.1]", 25, "layer[0].beta", "in [0, 1]"},
		{"unknown ps type", `ps_type = "cpu"`, `ps_type = "tpu"`, 6, "ps_type", `unknown type "tpu"`},
		{"duplicate type", `name = "v100"`, `name = "cpu"`, 15, "type[1].name", "duplicate"},
		{"zero batch", "batch = 4096", "batch = 0", 1, "batch", "must be > 0"},
		{"negative limit", "throughput_limit = 50000", "throughput_limit = -1.0", 3, "throughput_limit", ">= 0"},
		{"zero max units", "max_units = 16", "max_units = 0", 17, "type[1].max_units", "must be > 0"},
		{"negative price", "price = 2.48", "price = -2.48", 16, "type[1].price", ">= 0"},
		{"unknown kind", `name = "v100"`, "name = \"v100\"\nkind = \"tpu\"", 16, "type[1].kind", "unknown kind"},
		{"unknown dense sync", `name = "v100"`, "name = \"v100\"\ndense_sync = \"nccl\"", 16, "type[1].dense_sync", "unknown method"},
		{"ps ratio without type", `ps_type = "cpu"`, "", 7, "ps_ratio", "no ps_type"},
		{"unknown key", "epochs = 1", "epoch = 1", 4, "epoch", "unknown key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(goodProblem, c.old, c.new, 1)
			_, err := ParseProblem("p.toml", []byte(src))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("want *Error, got %v", err)
			}
			if ce.Line != c.line || ce.Field != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got line %d field %q: %v; want line %d field %q containing %q", ce.Line, ce.Field, err, c.line, c.field, c.msg)
			}
			if !strings.HasPrefix(err.Error(), "p.toml:") {
				t.Fatalf("error does not start with the file name: %v", err)
			}
		})
	}
}

func TestProblemNeedsTypesAndLayers(t *testing.T) {
	src := "batch = 1\nprofile_batch = 1\nepochs = 1\nsamples = 1\n"
	_, err := ParseProblem("p.toml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "at least one [[type]]") || !strings.Contains(err.Error(), "at least one [[layer]]") {
		t.Fatalf("got %v", err)
	}
}

// A profile may fit alpha below 0 (more units slow the layer down) down to
// MinAlpha.
func TestProblemTakesAlphaBelowZero(t *testing.T) {
	src := strings.Replace(goodProblem, "alpha = [0.95, 0.9]", "alpha = [-0.75, -10]", 1)
	p, err := ParseProblem("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if p.Layers[0].Alpha[0] != -0.75 || p.Layers[0].Alpha[1] != MinAlpha {
		t.Errorf("alpha %v, want [-0.75 -10]", p.Layers[0].Alpha)
	}
}

func TestProblemMarshalRoundTrips(t *testing.T) {
	p, err := ParseProblem("p.toml", []byte(goodProblem))
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseProblem("out.toml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if q.Layers[0].OCT[1] != p.Layers[0].OCT[1] || q.PSRatio != p.PSRatio || q.Types[1].Name != "v100" {
		t.Fatalf("round trip changed the problem:\n%s", out)
	}
}

func TestProblemValidateInCode(t *testing.T) {
	p := &Problem{Batch: 1, ProfileBatch: 1, Epochs: 1, Samples: 1,
		Types:  []ProblemType{{Name: "cpu", Price: 1, MaxUnits: 1}},
		Layers: []ProblemLayer{{Name: "l", OCT: []float64{1}, ODT: []float64{0}, Alpha: []float64{0.5}, Beta: []float64{2}}}}
	err := p.Validate()
	var ce *Error
	if !errors.As(err, &ce) || ce.Field != "layer[0].beta" {
		t.Fatalf("got %v", err)
	}
}

// TestLoadProfileNamesTheEstimatedTypes: a profile's header line naming
// the types it only estimated is read back; a file without one has none.
func TestLoadProfileNamesTheEstimatedTypes(t *testing.T) {
	_, src, err := ReadExample(ExampleProblems, "two-types")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "p.toml")
	header := "# heterps profile --model m\n" + ProfileEstimatedPrefix + "gpu, tpu\n# measured on this machine: cpu\n"
	if err := os.WriteFile(path, append([]byte(header), src...), 0o600); err != nil {
		t.Fatal(err)
	}
	p, est, err := LoadProfile(path)
	if err != nil || p == nil || !slices.Equal(est, []string{"gpu", "tpu"}) {
		t.Fatalf("LoadProfile: %v %v, want gpu and tpu estimated", est, err)
	}
	if est := EstimatedTypes(append(append([]byte{}, src...), []byte("\n"+ProfileEstimatedPrefix+"cpu\n")...)); len(est) != 0 {
		t.Errorf("a line after the header counted: %v", est)
	}
	if _, est, err := LoadProfile("two-types"); err != nil || len(est) != 0 {
		t.Errorf("a problem without the header: %v %v", est, err)
	}
}
