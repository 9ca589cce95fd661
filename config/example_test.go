package config

import (
	"strings"
	"testing"
)

// TestBuiltInExamplesLoadByName: catalogs, models, problems and jobs are
// compiled in, so a bare name works from any directory.
func TestBuiltInExamplesLoadByName(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, name := range ExampleNames(ExampleCatalogs) {
		if _, err := LoadCatalog(name); err != nil {
			t.Errorf("catalog %s: %v", name, err)
		}
	}
	for _, name := range ExampleNames(ExampleProblems) {
		if _, err := LoadProblem(name); err != nil {
			t.Errorf("problem %s: %v", name, err)
		}
	}
	for _, name := range ExampleNames(ExampleJobs) {
		label, src, err := ReadExample(ExampleJobs, name)
		if err == nil {
			_, err = ParseJob(label, src)
		}
		if err != nil {
			t.Errorf("job %s: %v", name, err)
		}
	}
	if _, err := LoadModel("ctrdnn"); err != nil {
		t.Error(err)
	}
	_, err := LoadCatalog("nowhere")
	if err == nil || !strings.Contains(err.Error(), "local") {
		t.Errorf("unknown catalog name: %v, want the list of built-in ones", err)
	}
	if len(ExampleNames(ExampleCatalogs)) < 3 || len(ExampleNames(ExampleJobs)) < 2 {
		t.Errorf("examples: %v %v", ExampleNames(ExampleCatalogs), ExampleNames(ExampleJobs))
	}
}

func TestReadCatalogSourceByNameOrPath(t *testing.T) {
	label, src, err := ReadCatalogSource("local")
	if err != nil || len(src) == 0 || label != "config/examples/catalogs/local.toml" {
		t.Fatalf("built-in local: %q, %d bytes, %v", label, len(src), err)
	}
	if _, err := ParseCatalog(label, src); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadCatalogSource("no-such-catalog"); err == nil {
		t.Error("an unknown name was accepted")
	}
}
