package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
)

// TestRunAndProfileWorkOutsideTheRepository: from a directory that holds
// no config/examples, run finds the built-in job and catalog (it gets as
// far as starting the daemon, a binary that exits at once here) and
// profile the built-in catalog.
func TestRunAndProfileWorkOutsideTheRepository(t *testing.T) {
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1)")
	}
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	code := runRun(context.Background(), []string{"ctrdnn-local", "--heterpsd", falseBin, "--log-dir", t.TempDir()}, &out, &errb)
	if code != exitFailure || !strings.Contains(errb.String(), "exited before serving") {
		t.Fatalf("run ctrdnn-local with the default catalog: exit %d, stderr %s", code, errb.String())
	}
	f, err := parseProfileFlags([]string{"--model", "linreg", "--batch", "16", "--reps", "1", "--units", "1",
		"--out", filepath.Join(t.TempDir(), "p.toml")}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatalf("profile with the default catalog: %v", err)
	}
}

// TestJobPathsResolveAgainstTheJobFile: a job's relative model, data and
// checkpoint paths name files beside the job file, wherever heterps runs.
func TestJobPathsResolveAgainstTheJobFile(t *testing.T) {
	jobs := t.TempDir()
	src := `version = 1
name = "rel"
model = "models/tiny.toml"
data = "libsvm,dense=2:data/day_0.svm"
batch = 8
steps = 2
profile = "profiles/p.toml"
[checkpoint]
dir = "ck"
every = 1
`
	if err := os.WriteFile(filepath.Join(jobs, "job.toml"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	got, err := readJob(filepath.Join(jobs, "job.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if got.label != filepath.Join(jobs, "job.toml") {
		t.Errorf("label %q, want the path given", got.label)
	}
	j, err := config.ParseJob("resolved", got.toml)
	if err != nil {
		t.Fatalf("%v\n%s", err, got.toml)
	}
	if j.Model != filepath.Join(jobs, "models/tiny.toml") || j.Data != "libsvm,dense=2:"+filepath.Join(jobs, "data/day_0.svm") ||
		j.Checkpoint.Dir != filepath.Join(jobs, "ck") || j.Steps != 2 || j.Profile != filepath.Join(jobs, "profiles/p.toml") {
		t.Fatalf("resolved job: model %q data %q checkpoint %q profile %q", j.Model, j.Data, j.Checkpoint.Dir, j.Profile)
	}
	// In place: each key keeps its line, so that errors name the author's.
	lines := strings.Split(string(got.toml), "\n")
	for i, want := range strings.Split(src, "\n") {
		if key, _, ok := strings.Cut(want, " = "); ok && !strings.HasPrefix(lines[i], key+" = ") {
			t.Fatalf("line %d is %q, want %s's", i+1, lines[i], key)
		}
	}

	// A table written inline cannot be rewritten in place: the document is
	// written anew, its paths resolved all the same.
	inline := "version = 1\nmodel = \"models/tiny.toml\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 2\ncheckpoint = { dir = \"ck\", every = 1 }\n"
	if err := os.WriteFile(filepath.Join(jobs, "inline.toml"), []byte(inline), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = readJob(filepath.Join(jobs, "inline.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if j, err = config.ParseJob("resolved", got.toml); err != nil {
		t.Fatalf("inline checkpoint table: %v\n%s", err, got.toml)
	}
	if j.Model != filepath.Join(jobs, "models/tiny.toml") || j.Checkpoint.Dir != filepath.Join(jobs, "ck") {
		t.Fatalf("inline checkpoint table: model %q checkpoint %q\n%s", j.Model, j.Checkpoint.Dir, got.toml)
	}

	// Nothing relative: the text, comments included, is sent as written.
	plain := "# comment\nversion = 1\nname = \"z\"\nmodel = \"ctrdnn\"\ndata = \"synthetic:1\"\nbatch = 8\nsteps = 2\n"
	if err := os.WriteFile(filepath.Join(jobs, "plain.toml"), []byte(plain), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readJob(filepath.Join(jobs, "plain.toml")); err != nil || string(got.toml) != plain {
		t.Fatalf("job without relative paths: %v\n%s", err, got.toml)
	}
}
