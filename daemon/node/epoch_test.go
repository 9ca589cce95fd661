package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// TestStageDataSaysEachEpoch: a stage reading a data file past its end
// logs "epoch 2", then "epoch 3", with the task's ids, as the file wraps.
func TestStageDataSaysEachEpoch(t *testing.T) {
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
