package pipeline

import (
	"runtime"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/native"
)

// hugeVocabModel is ctrModel with a 2^31-row vocabulary and wider
// embeddings: its tables would take 144 GiB if anyone built them whole
// (more than nn.DefaultMaxTableBytes, so such a build fails, never tries).
func hugeVocabModel(t *testing.T) *config.Model {
	t.Helper()
	src := strings.NewReplacer("vocab = 40", "vocab = 2147483648", "dim = 3", "dim = 9", "dim = 2", "dim = 9").Replace(ctrModel)
	m, err := config.ParseModel("huge.toml", []byte(strings.Replace(src, "%s", adamAdagrad, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// heapGrowth is the Go heap in use after f minus before it, with what f
// returns kept reachable until measured.
func heapGrowth(t *testing.T, f func() any) int64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

const boundedHeap = 256 << 20

func TestStageWorkerOfAHugeVocabularyBuildsInBoundedMemory(t *testing.T) {
	cfg := hugeVocabModel(t)
	grown := heapGrowth(t, func() any {
		m, err := BuildStageModel(native.MustCPU(), cfg, testSeed, Range{First: 0, Last: 3})
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWorker(Config{Job: testJob, Stages: 2, Layers: Range{First: 0, Last: 3}, Model: m,
			Backend: native.MustCPU(), PS: &ps.Client{}, Next: []Link{{Peer: "x", Stream: 1}},
			Batches: fixedBatches(func(int64) *data.Batch { return nil }), MicroBatches: MaxMicroBatches,
			Schedule: FillDrain}) // a layer copy per micro-batch, the most there is
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	})
	if grown > boundedHeap {
		t.Fatalf("a stage worker with %d micro-batch copies grew the heap by %d bytes", MaxMicroBatches, grown)
	}
}

func TestPSShardsOfAHugeVocabularyBuildInBoundedMemory(t *testing.T) {
	cfg := hugeVocabModel(t)
	stages := []Range{{First: 0, Last: 2}, {First: 3, Last: 5}}
	grown := heapGrowth(t, func() any {
		m, err := DeclareModel(native.MustCPU(), cfg, testSeed)
		if err != nil {
			t.Fatal(err)
		}
		tables, blocks, err := PSParams(m, stages, 10)
		if err != nil {
			t.Fatal(err)
		}
		var shards []*ps.Shard
		for _, c := range ShardConfigs(ShardSpec{Job: testJob, Model: cfg.Name, Shards: 2, Replicas: []int{1, 1},
			Backend: native.MustCPU()}, tables, blocks) {
			s, err := ps.NewShard(c)
			if err != nil {
				t.Fatal(err)
			}
			shards = append(shards, s)
		}
		return shards
	})
	if grown > boundedHeap {
		t.Fatalf("declaring the parameters and making two shards grew the heap by %d bytes", grown)
	}
}

func TestNewWorkerRefusesAModelWithoutItsStagesValues(t *testing.T) {
	cfg := modelConfig(t, adamAdagrad)
	m, err := BuildStageModel(native.MustCPU(), cfg, testSeed, Range{First: 4, Last: 5})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewWorker(Config{Job: testJob, Stages: 2, Layers: Range{First: 0, Last: 3}, Model: m,
		Backend: native.MustCPU(), PS: &ps.Client{}, Next: []Link{{Peer: "x", Stream: 1}},
		Batches: fixedBatches(func(int64) *data.Batch { return nil })})
	if err == nil || !strings.Contains(err.Error(), "BuildStageModel") {
		t.Fatalf("got %v, want a refusal of layer 3's missing values", err)
	}
}

func TestPSParamsRefusesAModelWithoutEveryDenseValue(t *testing.T) {
	cfg := modelConfig(t, adamAdagrad)
	m, err := BuildStageModel(native.MustCPU(), cfg, testSeed, Range{First: 4, Last: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := PSParams(m, []Range{{First: 0, Last: 5}}, 10); err == nil || !strings.Contains(err.Error(), "DeclareModel") {
		t.Fatalf("got %v, want a refusal naming DeclareModel", err)
	}
}

func TestEstimatePSRowBytesAgreesWithTheShards(t *testing.T) {
	cfg := modelConfig(t, adamAdagrad)
	m, err := DeclareModel(native.MustCPU(), cfg, testSeed)
	if err != nil {
		t.Fatal(err)
	}
	tables, _, err := PSParams(m, []Range{{First: 0, Last: 5}}, 10)
	if err != nil {
		t.Fatal(err)
	}
	est := nn.EstimatePSRowBytes(cfg)
	if len(est) != len(tables) {
		t.Fatalf("%d estimates for %d tables", len(est), len(tables))
	}
	for i, spec := range tables {
		want := ps.RowBytes(spec.Dim, spec.Optim.Hyper.StateBuffers())
		if est[i].Name != spec.Name || est[i].Bytes != want {
			t.Errorf("table %s: estimated %+v, the shard spends %d bytes a row", spec.Name, est[i], want)
		}
	}
}
