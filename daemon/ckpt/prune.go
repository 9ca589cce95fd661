package ckpt

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Prune removes the complete checkpoints under root that owns claims (by
// their manifests' job ids) beyond the newest keep of them, and returns
// the directories it removed. It never touches a step directory without a
// manifest (a checkpoint being written, or one whose writing died: the
// step is written again over it), a checkpoint owns does not claim (another
// job's in the same root), nor anything that is not a step directory,
// a link included. keep must be at least 1: the newest complete checkpoint
// is what a restart restores.
func Prune(root string, keep int, owns func(jobID string) bool) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("ckpt: prune %s: keep %d, want at least 1", root, keep)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("ckpt: prune: %w", err)
	}
	type complete struct {
		dir  string
		step int64
	}
	var mine []complete
	for _, e := range entries {
		step, ok := parseStepDir(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		m, err := ReadManifest(dir)
		if err != nil || m.Step != step || !owns(m.JobID) {
			continue
		}
		mine = append(mine, complete{dir, step})
	}
	slices.SortFunc(mine, func(a, b complete) int { return cmp.Compare(b.step, a.step) })
	var removed []string
	var errs []error
	for _, c := range mine[min(keep, len(mine)):] {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, c.dir)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("ckpt: prune %s: %w", root, err)
	}
	return removed, nil
}
