package config

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/heterps/heterps/config/examples"
)

// Kinds of example files, the folders of config/examples.
const (
	ExampleCatalogs = "catalogs"
	ExampleJobs     = "jobs"
	ExampleModels   = "models"
	ExampleProblems = "problems"
)

// IsExampleName reports whether s names an example rather than a file:
// no path separator and no ".toml" suffix ("local", "ctrdnn").
func IsExampleName(s string) bool {
	return s != "" && !strings.ContainsAny(s, `/`+string(filepath.Separator)) && !strings.HasSuffix(s, ".toml")
}

// ExampleNames lists the examples of a kind (ExampleCatalogs, ...).
func ExampleNames(kind string) []string {
	entries, _ := examples.FS.ReadDir(kind)
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".toml"))
	}
	sort.Strings(names)
	return names
}

// ReadExample returns the text of the example kind/name and the name it
// goes by in errors ("config/examples/catalogs/local.toml").
func ReadExample(kind, name string) (label string, src []byte, err error) {
	src, err = fs.ReadFile(examples.FS, path.Join(kind, name+".toml"))
	if err != nil {
		return "", nil, fmt.Errorf("%s %q: not a file and not a built-in example (%s)",
			strings.TrimSuffix(kind, "s"), name, strings.Join(ExampleNames(kind), ", "))
	}
	return "config/examples/" + kind + "/" + name + ".toml", src, nil
}

// readNamedOrFile reads a file, or with a bare name that is no file here
// the built-in example of kind; it returns the name to use in errors.
func readNamedOrFile(kind, nameOrPath string) (string, []byte, error) {
	if IsExampleName(nameOrPath) {
		if _, err := os.Stat(nameOrPath); err != nil {
			return ReadExample(kind, nameOrPath)
		}
	}
	src, err := ReadFile(nameOrPath)
	return nameOrPath, src, err
}

// ReadCatalogSource returns a catalog's text: the file at nameOrPath, or
// the built-in catalog of that name; label names it in errors.
func ReadCatalogSource(nameOrPath string) (label string, src []byte, err error) {
	return readNamedOrFile(ExampleCatalogs, nameOrPath)
}
