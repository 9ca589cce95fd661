package node

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ps"
)

// hugeTask is a PS task of the ctrdnn zoo model with a 2^31-row vocabulary
// (its table would take 72 GiB whole), one stage, one shard.
func hugeTask(t *testing.T) api.Task {
	t.Helper()
	src, err := config.ReadFile("../../config/examples/models/ctrdnn.toml")
	if err != nil {
		t.Fatal(err)
	}
	model := strings.Replace(string(src), "vocab = 1000001", "vocab = 2147483648", 1)
	if model == string(src) {
		t.Fatal("the ctrdnn model file no longer says vocab = 1000001")
	}
	return api.Task{JobID: "j1", Model: model, Seed: 1, Steps: 10, Mode: api.ModeBSP, PS: []string{"here"},
		Layout: []api.StageLayout{{FirstLayer: 0, LastLayer: 6, Replicas: 1}}}
}

func TestBuildShardsOfAHugeVocabularyInBoundedMemoryWithABudget(t *testing.T) {
	spec := hugeTask(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	shards, _, err := buildShards(spec, []*task{{spec: spec}}, 8<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 256<<20 {
		t.Fatalf("building the shard grew the heap by %d bytes", grown)
	}
	ids := make([]int64, 100000)
	for i := range ids {
		ids[i] = int64(i) << 10
	}
	_, _, err = shards[0].PullRows(context.Background(), "emb.table", ids, 0)
	if !errors.Is(err, ps.ErrMemoryBudget) || !strings.Contains(err.Error(), "budget of 8388608 bytes") {
		t.Fatalf("pulling 100000 rows under an 8 MiB budget: %v, want ErrMemoryBudget", err)
	}
	if _, _, err := shards[0].PullRows(context.Background(), "emb.table", ids[:10], 0); err != nil {
		t.Fatalf("a small pull after the refused one: %v", err)
	}
}

func TestConfigFromFileCarriesPSMemory(t *testing.T) {
	cfg, err := ConfigFromFile(&config.Node{Name: "n", Plain: true, PSMemory: 4 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PSMemory != 4<<30 {
		t.Fatalf("PSMemory %d, want 4 GiB", cfg.PSMemory)
	}
}

// The node file's data-plane switches reach the wire transport's config.
func TestConfigFromFileCarriesTransportSwitches(t *testing.T) {
	for _, n := range []config.Node{{TCPOnly: true}, {SocketOnly: true}, {}} {
		n.Name, n.Plain = "n", true
		cfg, err := ConfigFromFile(&n)
		if err != nil {
			t.Fatal(err)
		}
		w := (&Agent{cfg: cfg}).wireConfig("n")
		if w.TCPOnly != n.TCPOnly || w.NoSharedMemory != n.SocketOnly {
			t.Errorf("tcp_only %t socket_only %t: wire config TCPOnly %t NoSharedMemory %t", n.TCPOnly, n.SocketOnly, w.TCPOnly, w.NoSharedMemory)
		}
	}
}
