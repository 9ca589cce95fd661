package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pelletier/go-toml/v2"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
)

// readJob reads a job file, or a built-in example job by name
// ("ctrdnn-local"), checks it, and returns its text with relative paths
// (a model file, a data file, checkpoint dir and restore) made absolute
// against the job file's directory: the coordinator and the nodes do not
// run in the directory heterps was started from. label names it in
// messages.
func readJob(nameOrPath string) (label string, src []byte, err error) {
	dir := ""
	if config.IsExampleName(nameOrPath) && !fileExists(nameOrPath) {
		label, src, err = config.ReadExample(config.ExampleJobs, nameOrPath)
	} else {
		label = nameOrPath
		src, err = config.ReadFile(nameOrPath)
		if err == nil {
			dir, err = filepath.Abs(filepath.Dir(nameOrPath))
		}
	}
	if err != nil {
		return "", nil, usageError{err}
	}
	if _, err := config.ParseJob(label, src); err != nil {
		return "", nil, usageError{err}
	}
	if dir == "" {
		return label, src, nil
	}
	if src, err = resolveJobPaths(label, src, dir); err != nil {
		return "", nil, usageError{err}
	}
	return label, src, nil
}

// resolveJobPaths rewrites the job's relative paths as paths under dir.
// A job without relative paths keeps its text (and its comments).
func resolveJobPaths(label string, src []byte, dir string) ([]byte, error) {
	var doc map[string]any
	if err := toml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	changed := false
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		changed = true
		return filepath.Join(dir, p)
	}
	if m, ok := doc["model"].(string); ok && !config.IsExampleName(m) {
		doc["model"] = abs(m)
	}
	if d, ok := doc["data"].(string); ok {
		if spec, err := data.ParseSpec(d); err == nil && spec.Path != "" {
			spec.Path = abs(spec.Path)
			doc["data"] = spec.String()
		}
	}
	if p, ok := doc["profile"].(string); ok && !config.IsExampleName(p) {
		doc["profile"] = abs(p)
	}
	if ck, ok := doc["checkpoint"].(map[string]any); ok {
		for _, key := range []string{"dir", "restore"} {
			if p, ok := ck[key].(string); ok {
				ck[key] = abs(p)
			}
		}
	}
	if !changed {
		return src, nil
	}
	out, err := toml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	header := fmt.Sprintf("# %s, with its relative paths made absolute against %s\n", label, dir)
	return append([]byte(header), out...), nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
