package ckpt

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Prune keeps the newest keep complete checkpoints of the jobs it owns
// and removes their older ones; an incomplete step directory, another
// job's checkpoint, a link, and whatever is not a step directory stay.
func TestPruneKeepsTheNewest(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, step := range []int64{10, 20, 30, 40} {
		d, _ := completeCheckpoint(t, root, step, 2)
		dirs = append(dirs, d)
	}
	other, entries := writeShards(t, root, 5, 1)
	if err := WriteManifest(other, Manifest{JobID: "job-9", Step: 5, Shards: 1, Files: entries}); err != nil {
		t.Fatal(err)
	}
	partial, _ := writeShards(t, root, 50, 2) // being written: no manifest
	elsewhere := t.TempDir()
	linked, _ := completeCheckpoint(t, elsewhere, 1, 1)
	if err := os.Symlink(linked, filepath.Join(root, "step-0000000001")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}

	removed, err := Prune(root, 2, func(job string) bool { return job == "job-7" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dirs[1], dirs[0]}) {
		t.Errorf("removed %v, want steps 20 and 10", removed)
	}
	for _, gone := range dirs[:2] {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", gone, err)
		}
	}
	for _, kept := range []string{dirs[2], dirs[3], other, partial, linked, filepath.Join(root, "notes"), filepath.Join(root, "step-0000000001")} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s: %v, want it kept", kept, err)
		}
	}
	if got, err := LatestComplete(root); err != nil || got.Dir != dirs[3] {
		t.Errorf("latest after pruning: %+v, %v; want step 40", got, err)
	}
	if _, err := Prune(root, 0, func(string) bool { return true }); err == nil {
		t.Error("keep 0 accepted: it would remove the checkpoint a restart needs")
	}
}
