package node

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/data"
)

// bigCriteo writes a Criteo file of records rows (the sample's, repeated)
// and returns its data spec.
func bigCriteo(t *testing.T, records int) string {
	t.Helper()
	raw, err := os.ReadFile("../data/testdata/criteo_sample.csv")
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(strings.TrimSpace(string(raw)), "\n")
	rows := strings.Split(body, "\n")
	var b strings.Builder
	b.WriteString(head + "\n")
	for i := range records {
		b.WriteString(rows[i%len(rows)] + "\n")
	}
	path := filepath.Join(t.TempDir(), "criteo.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return "criteo:" + path
}

// TestDataMarksOutliveTheProcess: stage 0's first replica saves its data
// file's marks into the job's checkpoint directory (no other replica
// does), and a restored stage-0 replica in a process without marks loads
// them from the directory of the checkpoint it restores.
func TestDataMarksOutliveTheProcess(t *testing.T) {
	t.Cleanup(data.ForgetMarks)
	spec := bigCriteo(t, 140_000) // marks at records 0, 65,536 and 131,072
	src, err := data.Open(spec, data.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := src.Next(context.Background(), 4096); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	other := api.Task{Stage: 0, Replica: 1, Data: spec, CheckpointDir: dir}
	saveDataMarks(context.Background(), other, log)()
	if saved, _ := filepath.Glob(filepath.Join(dir, data.MarksDir, "*.json")); len(saved) != 0 {
		t.Fatalf("replica 1 saved marks: %v", saved)
	}
	first := api.Task{Stage: 0, Replica: 0, Data: spec, CheckpointDir: dir}
	saveDataMarks(context.Background(), first, log)()
	saved, _ := filepath.Glob(filepath.Join(dir, data.MarksDir, "*.json"))
	if len(saved) != 1 {
		t.Fatalf("replica 0 saved %v, want one marks file; log: %s", saved, logs.String())
	}
	var file struct{ Marks [][2]int64 }
	if b, err := os.ReadFile(saved[0]); err != nil || json.Unmarshal(b, &file) != nil || len(file.Marks) != 3 {
		t.Fatalf("marks file: %d marks (%v), want 3", len(file.Marks), err)
	}

	data.ForgetMarks() // a new process
	restored := api.Task{Stage: 0, Replica: 1, Data: spec, CheckpointDir: t.TempDir(), FirstStep: 100,
		RestoreDir: filepath.Join(dir, "step-0000000100")}
	loadDataMarks(restored, log)
	if !strings.Contains(logs.String(), "record marks loaded") || !strings.Contains(logs.String(), "marks=3") {
		t.Fatalf("the restored replica loaded no marks; log: %s", logs.String())
	}
}

// TestDataMarksAreSavedWhenTheyGrow: the saver writes the marks file when
// the marks grew since its last write only, not at every tick.
func TestDataMarksAreSavedWhenTheyGrow(t *testing.T) {
	t.Cleanup(data.ForgetMarks)
	every := marksSaveEvery
	marksSaveEvery = 5 * time.Millisecond
	t.Cleanup(func() { marksSaveEvery = every })
	spec := bigCriteo(t, 70_000) // marks at records 0 and 65,536
	src, err := data.Open(spec, data.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := src.Next(context.Background(), 66_000); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stop := saveDataMarks(context.Background(), api.Task{Stage: 0, Replica: 0, Data: spec, CheckpointDir: dir}, slog.New(slog.DiscardHandler))
	defer stop()
	var first os.FileInfo
	waitUntil(t, "the first save", func() bool {
		saved, _ := filepath.Glob(filepath.Join(dir, data.MarksDir, "*.json"))
		if len(saved) == 1 {
			first, _ = os.Stat(saved[0])
		}
		return first != nil
	})
	time.Sleep(20 * marksSaveEvery)
	saved, _ := filepath.Glob(filepath.Join(dir, data.MarksDir, "*.json"))
	if now, err := os.Stat(saved[0]); err != nil || !os.SameFile(first, now) {
		t.Fatalf("the marks file was written again with no new mark (%v)", err)
	}
}
