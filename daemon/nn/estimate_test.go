package nn

import (
	"context"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// estimateTolerance is how far EstimateStage may be from the measured
// heap of a real single-process build and step.
const estimateTolerance = 0.25

// measureStep returns the Go heap a trainer of the model holds after one
// step at batch rows, less its whole tables and their optimiser state as
// EstimateProcess counts them (EstimateStage leaves them to the parameter
// servers), and EstimateProcess's estimate of the rest.
func measureStep(t *testing.T, batch int) (measured, estimate int64) {
	t.Helper()
	cfg := loadZoo(t, "ctrdnn")
	cfg.Input.Vocab = 100000
	src := openData(t, "synthetic:1", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr, err := NewTrainer(native.MustCPU(), cfg, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := src.Next(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(b); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(tr)
	runtime.KeepAlive(b)
	tables, estimate, err := EstimateProcess(cfg, batch)
	if err != nil {
		t.Fatal(err)
	}
	return int64(after.HeapAlloc) - int64(before.HeapAlloc) - tables, estimate
}

func TestEstimateStageMatchesARealBuild(t *testing.T) {
	for _, batch := range []int{256, 2048} {
		measured, estimate := measureStep(t, batch)
		t.Logf("batch %d: measured %d bytes, estimated %d (%.2f)", batch, measured, estimate, float64(estimate)/float64(measured))
		if math.Abs(float64(estimate-measured)) > estimateTolerance*float64(measured) {
			t.Errorf("batch %d: estimate %d bytes, measured %d: more than %.0f%% apart", batch, estimate, measured, 100*estimateTolerance)
		}
	}
}

func TestEstimateStageRefusesAbsurdInputs(t *testing.T) {
	cfg := loadZoo(t, "ctrdnn")
	for name, c := range map[string][4]int{
		"reversed range":       {3, 2, 512, 1},
		"past the model":       {0, 99, 512, 1},
		"no batch":             {0, 6, 0, 1},
		"more micro than rows": {0, 6, 4, 8},
		"huge batch":           {0, 6, math.MaxInt, 1},
	} {
		if n, err := EstimateStage(cfg, c[0], c[1], c[2], c[3]); err == nil {
			t.Errorf("%s: got %d bytes, want an error", name, n)
		}
	}
	if _, err := EstimateStage(cfg, 0, 6, math.MaxInt, 1); err == nil || !strings.Contains(err.Error(), "2^63") {
		t.Errorf("huge batch: %v, want an error saying it overflows", err)
	}
}

func TestEstimateStageGrowsWithMicroBatchesAndLayers(t *testing.T) {
	cfg := loadZoo(t, "ctrdnn")
	one, _ := EstimateStage(cfg, 0, 6, 512, 1)
	four, _ := EstimateStage(cfg, 0, 6, 512, 4)
	head, _ := EstimateStage(cfg, 3, 6, 512, 1)
	dense := cfg.Shapes()[2].Weights + cfg.Shapes()[3].Weights + cfg.Shapes()[4].Weights + cfg.Shapes()[5].Weights + cfg.Shapes()[6].Weights
	if four-one != 3*dense*4 {
		t.Errorf("three more micro-batch copies add %d bytes, want 3 gradients of %d floats", four-one, dense)
	}
	if head >= one {
		t.Errorf("layers 3..6 estimated at %d bytes, the whole model at %d", head, one)
	}
}

func TestEstimatePSRowBytes(t *testing.T) {
	nce := loadZoo(t, "nce") // adagrad on the tables: one state buffer
	got := EstimatePSRowBytes(nce)
	if len(got) != 2 || got[0].Dim != 32 || got[0].Bytes != 32*2*4+36 || got[1].Dim != 129 || got[1].Bytes != 129*2*4+36 {
		t.Fatalf("nce tables: %+v", got)
	}
	ctr := loadZoo(t, "ctrdnn") // adam: two state buffers
	if got := EstimatePSRowBytes(ctr); len(got) != 1 || got[0].Bytes != 9*3*4+36 || got[0].Name != "emb.table" {
		t.Fatalf("ctrdnn tables: %+v", got)
	}
}
