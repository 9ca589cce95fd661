package node

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/pipeline"
)

// TestStageDataSaysEachEpoch: a stage reading a data file past its end
// logs "epoch 2", then "epoch 3", with the task's ids, as the file wraps.
func TestStageDataSaysEachEpoch(t *testing.T) {
	every := epochLogEvery
	epochLogEvery = 0
	t.Cleanup(func() { epochLogEvery = every })
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a := &Agent{log: slog.New(slog.NewTextHandler(&logs, nil))}
	s := api.Task{JobID: "j1", TaskID: "t1", Stage: 0, Replica: 0, Replicas: 1, Batch: 150,
		Data: "criteo:../data/testdata/criteo_sample.csv", DataShards: 1}
	in, err := stageInput(context.Background(), s, cfg, a.taskLog(s))
	if err != nil {
		t.Fatal(err)
	}
	for step := range int64(5) { // the file holds 200 records: 150, 50 (a pass ends short), 150, 50, 150
		if _, err := in.Next(context.Background(), step+1, firstShare(s)); err != nil {
			in.Close()
			t.Fatal(err)
		}
	}
	in.Close() // the input reads ahead: its reader logs until it is closed
	got := logs.String()
	for _, want := range []string{`msg="epoch 2"`, `msg="epoch 3"`} {
		if !strings.Contains(got, want) {
			t.Errorf("logs lack %s: %s", want, got)
		}
	}
	if strings.Contains(got, `"epoch 1"`) || !strings.Contains(got, "job=j1") || !strings.Contains(got, "stage=0") {
		t.Errorf("logs: %s", got)
	}
}

// TestARestoredStageReadsOnWhereTheRunHadGot: a stage restored at step k
// of a job on a data file reads the batch an uninterrupted run reads at
// step k+1 — also a thousand steps on, five hundred passes over the file,
// which it passes over without decoding them.
func TestARestoredStageReadsOnWhereTheRunHadGot(t *testing.T) {
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	s := api.Task{JobID: "j1", TaskID: "t1", Stage: 0, Replica: 0, Replicas: 1, Batch: 150,
		Data: "criteo:../data/testdata/criteo_sample.csv", DataShards: 1}
	ctx := context.Background()
	uninterrupted, err := stageInput(ctx, s, cfg, a.taskLog(s))
	if err != nil {
		t.Fatal(err)
	}
	defer uninterrupted.Close()
	var want []any
	for step := int64(1); step <= 1001; step++ {
		b, err := uninterrupted.Next(ctx, step, firstShare(s))
		if err != nil {
			t.Fatal(err)
		}
		if step == 4 || step == 1001 {
			want = append(want, b)
		}
	}
	for i, k := range []int64{3, 1000} {
		s.FirstStep = k
		in, err := stageInput(ctx, s, cfg, a.taskLog(s))
		if err != nil {
			t.Fatal(err)
		}
		got, err := in.Next(ctx, k+1, firstShare(s))
		in.Close()
		if err != nil || !reflect.DeepEqual(any(got), want[i]) {
			t.Errorf("restored at step %d: %v; its first batch is the uninterrupted run's: %v", k, err, reflect.DeepEqual(any(got), want[i]))
		}
	}
}

// TestASmallFileReadOverAndOverLogsItsPassesSparingly: a file read a
// thousand times in a few seconds says "epoch 2" once, not a line a pass:
// a week of a small data set does not fill the node's log.
func TestASmallFileReadOverAndOverLogsItsPassesSparingly(t *testing.T) {
	var logs bytes.Buffer
	say := epochLogger(slog.New(slog.NewTextHandler(&logs, nil)), "criteo:small.csv")
	for epoch := 2; epoch <= 1000; epoch++ {
		say(epoch)
	}
	if n := strings.Count(logs.String(), `msg="epoch `); n != 1 || !strings.Contains(logs.String(), `msg="epoch 2"`) {
		t.Errorf("%d epoch lines for 999 passes in a moment, want the first alone:\n%s", n, logs.String())
	}
}

// stageInput is startStageInput that waits for its pass over the trained
// batches: stage 0's input ready for its first step.
func stageInput(ctx context.Context, s api.Task, cfg *config.Model, log *slog.Logger) (*pipeline.ShardedInput, error) {
	in, pass, err := startStageInput(ctx, s, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := pass.wait(ctx); err != nil {
		pass.stop()
		in.Close()
		return nil, err
	}
	return in, nil
}
