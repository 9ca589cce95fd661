package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
)

// jobText is a job file as heterps submits it.
type jobText struct {
	// label names the file as the user gave it; the coordinator's errors
	// about the file name it too (api.JobFileParam).
	label string
	toml  []byte
}

// readJob reads a job file, or a built-in example job by name
// ("ctrdnn-local"), checks it, and returns its text with relative paths
// (a model file, a data file, checkpoint dir and restore) made absolute
// against the job file's directory: the coordinator and the nodes do not
// run in the directory heterps was started from.
func readJob(nameOrPath string) (jobText, error) {
	var (
		label, dir string
		src        []byte
		err        error
	)
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
		return jobText{}, usageError{err}
	}
	if _, err := config.ParseJob(label, src); err != nil {
		return jobText{}, usageError{err}
	}
	if dir != "" {
		if src, err = resolveJobPaths(label, src, dir); err != nil {
			return jobText{}, usageError{err}
		}
	}
	return jobText{label: label, toml: src}, nil
}

// resolveJobPaths rewrites the job's relative paths as paths under dir.
// A job without relative paths keeps its text. The new paths replace the
// old where they stand when they can (config.SetStrings), so that the
// coordinator's errors about the file name the author's lines; else the
// document is written anew, without its comments.
func resolveJobPaths(label string, src []byte, dir string) ([]byte, error) {
	var doc map[string]any
	if err := toml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	changes := relativeJobPaths(doc, dir)
	if len(changes) == 0 {
		return src, nil
	}
	note := fmt.Sprintf("# %q, with its relative paths made absolute against %q\n", label, dir) // quoted: a name may hold a newline
	if out, ok := config.SetStrings(src, changes); ok {
		return append(out, note...), nil
	}
	for field, p := range changes {
		if table, key, nested := strings.Cut(field, "."); nested {
			doc[table].(map[string]any)[key] = p
		} else {
			doc[field] = p
		}
	}
	out, err := toml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	return append([]byte(note), out...), nil
}

// relativeJobPaths returns the job document's relative paths made absolute
// against dir, by field: model, data's path, profile, checkpoint.dir and
// checkpoint.restore.
func relativeJobPaths(doc map[string]any, dir string) map[string]string {
	changes := map[string]string{}
	abs := func(field, p string) {
		if p != "" && !filepath.IsAbs(p) {
			changes[field] = filepath.Join(dir, p)
		}
	}
	if m, ok := doc["model"].(string); ok && !config.IsExampleName(m) {
		abs("model", m)
	}
	if d, ok := doc["data"].(string); ok {
		if spec, err := data.ParseSpec(d); err == nil && spec.Path != "" && !filepath.IsAbs(spec.Path) {
			spec.Path = filepath.Join(dir, spec.Path)
			changes["data"] = spec.String()
		}
	}
	if p, ok := doc["profile"].(string); ok && !config.IsExampleName(p) {
		abs("profile", p)
	}
	if ck, ok := doc["checkpoint"].(map[string]any); ok {
		for _, key := range []string{"dir", "restore"} {
			if p, ok := ck[key].(string); ok {
				abs("checkpoint."+key, p)
			}
		}
	}
	return changes
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
