package node

import (
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"log/slog"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/native"
)

func TestPSHostFindsLocalShardsByJobAndIndex(t *testing.T) {
	h := newPSHost(nil, 0, slog.New(slog.DiscardHandler))
	var shards []*ps.Shard
	for _, i := range []int{1, 3} {
		s, err := ps.NewShard(ps.Config{Job: "j1", Shard: i, Shards: 4, Replicas: map[int]int{0: 1}, Backend: native.MustCPU()})
		if err != nil {
			t.Fatal(err)
		}
		shards = append(shards, s)
	}
	if h.local("j1", 1) != nil {
		t.Fatal("a shard before the job's shards are up")
	}
	h.set("j1", &psJob{shards: shards})
	if got := h.local("j1", 3); got != shards[1] {
		t.Errorf("local(j1, 3) = %v, want shard 3", got)
	}
	if got := h.local("j1", 2); got != nil {
		t.Errorf("local(j1, 2) = shard %d, want none: it is on another node", got.Index())
	}
	if got := h.local("j2", 1); got != nil {
		t.Errorf("local(j2, 1) = shard of job j2, which has none here")
	}
	h.set("j1", nil)
	if h.local("j1", 1) != nil {
		t.Error("a shard after the job left the node")
	}
}

// TestStageDataMustFitTheModel: stage 0 refuses data its model cannot read
// when it opens it, before training (for files only the nodes see, which
// the coordinator could not check).
func TestStageDataMustFitTheModel(t *testing.T) {
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	_, err = openData(api.Task{Data: "avazu:../data/testdata/avazu_sample.csv", DataShards: 1}, cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "reads 26 sparse slots; the data has 22") {
		t.Fatalf("openData: %v", err)
	}
	src, err := openData(api.Task{Data: "criteo:../data/testdata/criteo_sample.csv", DataShards: 1}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
}
