package node

import (
	"log/slog"
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
