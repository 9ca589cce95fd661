package ckpt

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// stepDirPrefix starts the name of every step directory.
const stepDirPrefix = "step-"

// ErrNoCheckpoint is wrapped by LatestComplete's error when root holds no
// complete checkpoint.
var ErrNoCheckpoint = errors.New("no complete checkpoint")

// StepDir returns the directory under root for the checkpoint of a step:
// root/step-0000001000. The zero padding keeps a listing in step order.
func StepDir(root string, step int64) string {
	return filepath.Join(root, fmt.Sprintf("%s%010d", stepDirPrefix, step))
}

// parseStepDir returns the step of a step directory's name.
func parseStepDir(name string) (int64, bool) {
	digits, ok := strings.CutPrefix(name, stepDirPrefix)
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	step, err := strconv.ParseInt(digits, 10, 64)
	return step, err == nil
}

// Checkpoint is a complete, verified checkpoint directory.
type Checkpoint struct {
	Dir      string
	Manifest Manifest
}

// LatestComplete returns the checkpoint of the highest step under root, among
// the step directories (see StepDir) that have a manifest; directories without
// one were never finished and are skipped. The chosen checkpoint is verified
// in full (VerifyDir). A manifest that fails verification, or whose step is not
// its directory's, is an error rather than a reason to fall back silently to
// an older step: a complete checkpoint cannot be damaged by a crash, so the
// damage is the operator's to see. With no complete checkpoint the error wraps
// ErrNoCheckpoint.
func LatestComplete(root string) (Checkpoint, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("ckpt: %w", err)
	}
	type stepDir struct {
		step int64
		dir  string
	}
	var dirs []stepDir
	for _, e := range entries {
		if step, ok := parseStepDir(e.Name()); ok && e.IsDir() {
			dirs = append(dirs, stepDir{step, filepath.Join(root, e.Name())})
		}
	}
	slices.SortFunc(dirs, func(a, b stepDir) int { return cmp.Compare(b.step, a.step) })
	for _, d := range dirs {
		m, err := VerifyDir(d.dir)
		if errors.Is(err, ErrNoManifest) {
			continue
		}
		if err != nil {
			return Checkpoint{}, err
		}
		if m.Step != d.step {
			return Checkpoint{}, fmt.Errorf("ckpt: %s: manifest is of step %d", d.dir, m.Step)
		}
		return Checkpoint{Dir: d.dir, Manifest: m}, nil
	}
	return Checkpoint{}, fmt.Errorf("ckpt: %s: %w", root, ErrNoCheckpoint)
}
