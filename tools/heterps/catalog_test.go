package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
)

func catalog(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runCatalog(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCatalogSynthPrintsValidCatalogs(t *testing.T) {
	for _, n := range []string{"1", "8", "64"} {
		code, out, errs := catalog("synth", "--types", n, "--seed", "3")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errs)
		}
		c, err := config.ParseCatalog("synth.toml", []byte(out))
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if len(c.Types) != map[string]int{"1": 1, "8": 8, "64": 64}[n] {
			t.Fatalf("%s types: got %d", n, len(c.Types))
		}
		if _, again, _ := catalog("synth", "--types", n, "--seed", "3"); again != out {
			t.Fatalf("same seed, different output")
		}
	}
}

func TestCatalogSynthProblemPlans(t *testing.T) {
	code, out, errs := catalog("synth", "--types", "4", "--seed", "1", "--problem", "--layers", "12")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	p, err := config.ParseProblem("synth.toml", []byte(out))
	if err != nil || len(p.Layers) != 12 || len(p.Types) != 4 {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestCatalogErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"synth", "--types", "0"}, {"synth", "--types", "65"}, {"synth", "--problem", "--layers", "2"}, {"check"}} {
		if code, _, _ := catalog(args...); code != exitUsage {
			t.Errorf("%v: exit %d", args, code)
		}
	}
}

func TestCatalogCheck(t *testing.T) {
	code, out, errs := catalog("check", "../../config/examples/catalogs/grid5000.toml")
	if code != exitOK || !strings.Contains(out, "ok, 7 types") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	code, _, errs = catalog("check", "../../config/examples/problems/two-types.toml")
	if code != exitUsage || !strings.Contains(errs, "two-types.toml") {
		t.Fatalf("a problem file passed as a catalog: exit %d: %s", code, errs)
	}
	// Every fault of a file on a line of its own, each line prefixed.
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("version = 1\n[[type]]\nname = \"x\"\nkind = \"tpu\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = catalog("check", bad)
	lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	if code != exitUsage || len(lines) < 4 {
		t.Fatalf("exit %d, want a line a fault:\n%s", code, errs)
	}
	for _, line := range lines {
		if !strings.HasPrefix(line, "heterps catalog check: "+bad+":") {
			t.Errorf("line %q, want the command and the file first", line)
		}
	}
}
