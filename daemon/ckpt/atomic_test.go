package ckpt

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// injectWriteFailure makes the next atomic writes fail after n bytes.
func injectWriteFailure(t *testing.T, n int) {
	t.Helper()
	testHookWrap = func(w io.Writer) io.Writer { return &failAfter{w: w, n: n} }
	t.Cleanup(func() { testHookWrap = nil })
}

// previousCheckpoint writes step 1 at dir/m.safetensors and returns its bytes.
func previousCheckpoint(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	path := filepath.Join(dir, "m.safetensors")
	if _, err := WriteFile(path, NewMetadata("ctrdnn", 1), []Tensor{Float32("w", []int64{4}, []float32{1, 2, 3, 4})}); err != nil {
		t.Fatal(err)
	}
	return path, readFile(t, path)
}

func bigUpdate() []Tensor {
	return []Tensor{Float32("w", []int64{1 << 18}, make([]float32, 1<<18))}
}

// A write that fails midway (the disk fills up) leaves the previous
// checkpoint as it was and no temporary file behind.
func TestFailedWriteKeepsPreviousCheckpoint(t *testing.T) {
	for _, failAt := range []int{0, 5, 100, 300_000} {
		dir := t.TempDir()
		path, before := previousCheckpoint(t, dir)
		injectWriteFailure(t, failAt)
		_, err := WriteFile(path, NewMetadata("ctrdnn", 2), bigUpdate())
		testHookWrap = nil
		if !errors.Is(err, errInjected) {
			t.Fatalf("fail at %d: error %v, want the injected one", failAt, err)
		}
		if after := readFile(t, path); !bytes.Equal(before, after) {
			t.Errorf("fail at %d: the previous checkpoint changed", failAt)
		}
		if names := dirNames(t, dir); !slices.Equal(names, []string{"m.safetensors"}) {
			t.Errorf("fail at %d: directory holds %v", failAt, names)
		}
	}
}

// A Stream callback that fails after writing part of its tensor does the same.
func TestFailedStreamKeepsPreviousCheckpoint(t *testing.T) {
	dir := t.TempDir()
	path, before := previousCheckpoint(t, dir)
	table := Stream("table", F32, []int64{1000, 4}, func(w io.Writer) error {
		for row := range 1000 {
			if row == 600 {
				return errInjected // a shard's table changed under the writer, say
			}
			if err := WriteFloat32(w, []float32{1, 2, 3, 4}); err != nil {
				return err
			}
		}
		return nil
	})
	_, err := WriteFile(path, NewMetadata("ctrdnn", 2), []Tensor{table})
	if !errors.Is(err, errInjected) {
		t.Fatalf("error %v, want the injected one", err)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Error("the previous checkpoint changed")
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"m.safetensors"}) {
		t.Errorf("directory holds %v", names)
	}
}

func TestWriteIntoMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := WriteFile(filepath.Join(dir, "no", "m.safetensors"), nil, nil)
	wantErrContains(t, err, "no/m.safetensors")
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("directory holds %v", names)
	}
}

// A temporary file that a writer killed mid-write left beside its target
// goes with the next write of that target once it has gone unwritten for
// staleTempAge; one being written (a racing writer's) and other files stay.
func TestWriteRemovesADeadWritersTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".m.safetensors.tmp-123456")
	live := filepath.Join(dir, ".m.safetensors.tmp-654321")
	others := []string{live, filepath.Join(dir, ".n.safetensors.tmp-1"), filepath.Join(dir, "m.safetensors.tmp-2"), filepath.Join(dir, "notes")}
	for _, p := range append([]string{stale}, others...) {
		if err := os.WriteFile(p, []byte("half a checkpoint"), 0o644); err != nil {
			t.Fatal(err)
		}
		if p != live {
			old := time.Now().Add(-staleTempAge - time.Minute)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	path, _ := previousCheckpoint(t, dir)
	f, err := Open(path)
	if err != nil {
		t.Fatalf("the new checkpoint: %v", err)
	}
	f.Close()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there (%v)", stale, err)
	}
	for _, p := range others {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s, not a dead writer's temporary file of this target, is gone: %v", p, err)
		}
	}
}
