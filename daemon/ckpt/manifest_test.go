package ckpt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// writeShards writes a PS-style checkpoint of n shards for step into its
// step directory under root and returns the directory and the file entries.
func writeShards(t *testing.T, root string, step int64, n int) (string, []FileEntry) {
	t.Helper()
	dir := StepDir(root, step)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var entries []FileEntry
	for shard := range n {
		rows := make([]float32, 90*(shard+1))
		for i := range rows {
			rows[i] = float32(step) + float32(i)/10
		}
		e, err := WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%d.safetensors", shard)), NewMetadata("ctrdnn", step),
			[]Tensor{Float32("emb.rows", []int64{int64(10 * (shard + 1)), 9}, rows)})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	return dir, entries
}

func completeCheckpoint(t *testing.T, root string, step int64, n int) (string, Manifest) {
	t.Helper()
	dir, entries := writeShards(t, root, step, n)
	m := Manifest{JobID: "job-7", Step: step, Shards: n, Files: entries}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	m.FormatVersion = ManifestVersion
	return dir, m
}

func TestManifestRoundTrip(t *testing.T) {
	dir, want := completeCheckpoint(t, t.TempDir(), 100, 3)
	got, err := VerifyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("VerifyDir = %+v, want %+v", got, want)
	}
	var raw map[string]any
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, ManifestName)), &raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"format_version", "job_id", "step", "shards", "files"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("manifest has no %q: %v", key, raw)
		}
	}
	if names := dirNames(t, dir); len(names) != 4 {
		t.Errorf("directory holds %v, want 3 shards and the manifest", names)
	}
}

func TestVerifyFindsDamagedShards(t *testing.T) {
	dir, m := completeCheckpoint(t, t.TempDir(), 5, 4)
	shard := func(i int) string { return filepath.Join(dir, m.Files[i].Name) }

	if err := os.Truncate(shard(0), m.Files[0].Size-1); err != nil { // truncated
		t.Fatal(err)
	}
	data := readFile(t, shard(2)) // one bit flipped, same size
	data[len(data)-1] ^= 1
	if err := os.WriteFile(shard(2), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(shard(3)); err != nil { // missing
		t.Fatal(err)
	}

	_, err := VerifyDir(dir)
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v, want a *VerifyError", err)
	}
	if len(ve.Problems) != 3 {
		t.Fatalf("problems = %+v, want shards 0, 2 and 3", ve.Problems)
	}
	checks := []struct {
		index   int
		missing bool
		reason  string
	}{{0, false, fmt.Sprintf("%d bytes, manifest says %d", m.Files[0].Size-1, m.Files[0].Size)}, {2, false, "sha256"}, {3, true, "missing"}}
	for i, c := range checks {
		p := ve.Problems[i]
		if p.Name != m.Files[c.index].Name || p.Missing != c.missing || !strings.Contains(p.Reason, c.reason) {
			t.Errorf("problem %d = %+v, want %s with %q", i, p, m.Files[c.index].Name, c.reason)
		}
		if !strings.Contains(err.Error(), m.Files[c.index].Name) {
			t.Errorf("message %q does not name %s", err, m.Files[c.index].Name)
		}
	}
}

func TestMissingManifest(t *testing.T) {
	dir, _ := writeShards(t, t.TempDir(), 3, 2)
	if _, err := VerifyDir(dir); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("VerifyDir: %v, want ErrNoManifest", err)
	}
	if _, err := ReadManifest(dir); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("ReadManifest: %v, want ErrNoManifest", err)
	}
}

func TestWriteManifestRefuses(t *testing.T) {
	dir, entries := writeShards(t, t.TempDir(), 1, 2)
	good := func() Manifest {
		return Manifest{JobID: "j", Step: 1, Shards: 2, Files: slices.Clone(entries)}
	}
	cases := []struct {
		name   string
		edit   func(*Manifest)
		reason string
	}{
		{"file not written", func(m *Manifest) { m.Files[1].Name = "shard-9.safetensors" }, "no such file"},
		{"size differs", func(m *Manifest) { m.Files[0].Size++ }, "the entry says"},
		{"path outside", func(m *Manifest) { m.Files[0].Name = "../shard-0.safetensors" }, "not a file name"},
		{"the manifest itself", func(m *Manifest) { m.Files[0].Name = ManifestName }, "not a file name"},
		{"listed twice", func(m *Manifest) { m.Files[1] = m.Files[0] }, "listed twice"},
		{"bad digest", func(m *Manifest) { m.Files[0].SHA256 = strings.ToUpper(m.Files[0].SHA256) }, "not 64 lower-case hex"},
		{"no shards", func(m *Manifest) { m.Shards = 0 }, "shards is 0"},
		{"no files", func(m *Manifest) { m.Files = nil }, "lists no files"},
		{"negative step", func(m *Manifest) { m.Step = -1 }, "step is negative"},
	}
	for _, c := range cases {
		m := good()
		c.edit(&m)
		wantErrContains(t, WriteManifest(dir, m), c.reason)
		if _, err := os.Stat(filepath.Join(dir, ManifestName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: a manifest was written", c.name)
		}
	}
	if err := WriteManifest(dir, good()); err != nil {
		t.Fatalf("the unedited manifest: %v", err)
	}
}

// A manifest write that fails leaves no manifest: the checkpoint stays
// incomplete rather than becoming half-listed.
func TestFailedManifestWriteLeavesNone(t *testing.T) {
	dir, entries := writeShards(t, t.TempDir(), 1, 2)
	before := dirNames(t, dir)
	injectWriteFailure(t, 10)
	err := WriteManifest(dir, Manifest{JobID: "j", Step: 1, Shards: 2, Files: entries})
	if !errors.Is(err, errInjected) {
		t.Fatalf("error %v, want the injected one", err)
	}
	if after := dirNames(t, dir); !slices.Equal(before, after) {
		t.Errorf("directory went from %v to %v", before, after)
	}
}

func TestReadManifestRejectsHostile(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	cases := []struct{ name, body, reason string }{
		{"not JSON", `{"step":`, "not a valid manifest"},
		{"unknown field", `{"format_version":1,"job_id":"j","step":1,"shards":1,"files":[],"extra":1}`, "unknown field"},
		{"data after", `{"format_version":1,"job_id":"j","step":1,"shards":1,"files":[{"name":"a","size":1,"sha256":"` + sum + `"}]} {}`, "data after"},
		{"other version", `{"format_version":2,"job_id":"j","step":1,"shards":1,"files":[{"name":"a","size":1,"sha256":"` + sum + `"}]}`, "format_version is 2"},
		{"absolute path", `{"format_version":1,"job_id":"j","step":1,"shards":1,"files":[{"name":"/etc/passwd","size":1,"sha256":"` + sum + `"}]}`, "not a file name"},
		{"negative size", `{"format_version":1,"job_id":"j","step":1,"shards":1,"files":[{"name":"a","size":-1,"sha256":"` + sum + `"}]}`, "size is negative"},
		{"short digest", `{"format_version":1,"job_id":"j","step":1,"shards":1,"files":[{"name":"a","size":1,"sha256":"abcd"}]}`, "lower-case hex"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadManifest(dir)
		if err == nil || !strings.Contains(err.Error(), c.reason) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s: error %v, want one naming %s and containing %q", c.name, err, dir, c.reason)
		}
	}

	dir := t.TempDir()
	if err := os.Truncate(mustCreate(t, filepath.Join(dir, ManifestName)), maxManifestSize+1); err != nil {
		t.Fatal(err)
	}
	_, err := ReadManifest(dir)
	wantErrContains(t, err, "larger than")
}

func mustCreate(t *testing.T, path string) string {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLatestComplete(t *testing.T) {
	root := t.TempDir()
	completeCheckpoint(t, root, 1, 2)
	want, _ := completeCheckpoint(t, root, 5, 2)
	writeShards(t, root, 7, 2) // crashed before its manifest
	for _, name := range []string{"notes", "step-", "step-12x", "step--3"} {
		if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(t, filepath.Join(root, "step-0000000009")) // a file, not a directory

	got, err := LatestComplete(root)
	if err != nil {
		t.Fatal(err)
	}
	if got.Dir != want || got.Manifest.Step != 5 || len(got.Manifest.Files) != 2 {
		t.Errorf("LatestComplete = %+v, want %s at step 5", got, want)
	}
}

// Unpadded step numbers sort by value, not as text.
func TestLatestCompleteComparesNumbers(t *testing.T) {
	root := t.TempDir()
	for _, step := range []int64{9, 10} {
		dir, entries := writeShards(t, root, step, 1)
		plain := filepath.Join(root, fmt.Sprintf("step-%d", step))
		if err := os.Rename(dir, plain); err != nil {
			t.Fatal(err)
		}
		if err := WriteManifest(plain, Manifest{JobID: "j", Step: step, Shards: 1, Files: entries}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LatestComplete(root)
	if err != nil || got.Manifest.Step != 10 {
		t.Fatalf("LatestComplete = %+v, %v; want step 10", got, err)
	}
}

func TestLatestCompleteReportsDamage(t *testing.T) {
	root := t.TempDir()
	completeCheckpoint(t, root, 1, 2)
	dir, m := completeCheckpoint(t, root, 2, 2)
	if err := os.Remove(filepath.Join(dir, m.Files[1].Name)); err != nil {
		t.Fatal(err)
	}
	_, err := LatestComplete(root)
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Dir != dir || !ve.Problems[0].Missing {
		t.Fatalf("error %v, want a *VerifyError for %s", err, dir)
	}
}

func TestLatestCompleteStepMismatch(t *testing.T) {
	root := t.TempDir()
	dir, entries := writeShards(t, root, 4, 1)
	if err := WriteManifest(dir, Manifest{JobID: "j", Step: 3, Shards: 1, Files: entries}); err != nil {
		t.Fatal(err)
	}
	_, err := LatestComplete(root)
	wantErrContains(t, err, "manifest is of step 3")
}

func TestNoCompleteCheckpoint(t *testing.T) {
	root := t.TempDir()
	if _, err := LatestComplete(root); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty root: %v", err)
	}
	writeShards(t, root, 1, 1)
	if _, err := LatestComplete(root); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("only an incomplete checkpoint: %v", err)
	}
	if _, err := LatestComplete(filepath.Join(root, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing root: %v", err)
	}
}

func TestStepDir(t *testing.T) {
	for _, step := range []int64{0, 42, 1 << 40} {
		if got, ok := parseStepDir(filepath.Base(StepDir("/ckpt", step))); !ok || got != step {
			t.Errorf("StepDir(%d) parses back as %d, %v", step, got, ok)
		}
	}
	if filepath.Base(StepDir("/ckpt", 42)) != "step-0000000042" {
		t.Errorf("StepDir(42) = %s", StepDir("/ckpt", 42))
	}
}
