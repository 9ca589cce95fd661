package pipeline

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// ctrdnn's dense parameters: weights and biases of fc1..fc4 and the logit
// (layers 2..6). The three large weights are reduced alone, the seven small
// parameters in one bucket, complete when backward leaves fc1.
func TestFuseBucketsGroupsTheSmallParameters(t *testing.T) {
	lens := []int{247 * 512, 512, 512 * 256, 256, 256 * 128, 128, 128 * 32, 32, 32, 1}
	layers := []int{2, 2, 3, 3, 4, 4, 5, 5, 6, 6}
	got := fuseBuckets(lens, layers)
	if len(got) != 4 {
		t.Fatalf("%d buckets, want 4: %+v", len(got), got)
	}
	for k, want := range []int{4, 2, 0} {
		if b := got[k]; b.fused() || b.params[0] != want || !slices.Equal(b.layers, []int{layers[want]}) {
			t.Errorf("bucket %d: %+v, want parameter %d alone", k, b, want)
		}
	}
	small := got[3]
	if !slices.Equal(small.params, []int{9, 8, 7, 6, 5, 3, 1}) || !slices.Equal(small.layers, []int{6, 5, 4, 3, 2}) {
		t.Fatalf("the small parameters' bucket: %+v", small)
	}
	if want := []int{0, 1, 33, 65, 4161, 4289, 4545, 5057}; !slices.Equal(small.offs, want) {
		t.Fatalf("offsets %v, want %v", small.offs, want)
	}

	// A bucket closes once it holds fuseFloats floats or more.
	many := slices.Repeat([]int{fuseFloats / 3}, 7)
	got = fuseBuckets(many, []int{0, 1, 2, 3, 4, 5, 6})
	if len(got) != 2 || len(got[0].params) != 4 || len(got[1].params) != 3 {
		t.Fatalf("7 parameters of a third of the cap: %+v, want buckets of 4 and 3", got)
	}
	if got = fuseBuckets([]int{5, 5}, []int{0, 1}); len(got) != 1 || !got[0].fused() {
		t.Fatalf("two small parameters: %+v, want one bucket", got)
	}
	old := fuseFloats
	fuseFloats = 0
	defer func() { fuseFloats = old }()
	if got = fuseBuckets([]int{5, 5}, []int{0, 1}); len(got) != 2 || got[0].fused() {
		t.Fatalf("fusion off: %+v, want each alone", got)
	}
}

// A bucket is done once backward has left every one of its layers,
// whichever order it leaves them in: a CPU backend of one thread finishes
// the weight gradients from the first layer up, two threads from the last
// down (a bucket started at its lowest layer read the gradients of the
// layers above before they were computed).
func TestBucketsAreDoneOnceEveryLayerIs(t *testing.T) {
	lens := []int{247 * 512, 512, 512 * 256, 256, 256 * 128, 128, 128 * 32, 32, 32, 1}
	layers := []int{2, 2, 3, 3, 4, 4, 5, 5, 6, 6}
	buckets := fuseBuckets(lens, layers) // fc3.W, fc2.W and fc1.W alone, then the rest
	for _, order := range [][]int{{6, 5, 4, 3, 2}, {2, 3, 4, 5, 6}} {
		st := &stepState{}
		var seen [][]int
		for _, l := range order {
			seen = append(seen, st.bucketsDone(buckets, l))
		}
		for i, l := range order {
			want := []int{}
			switch l {
			case 4:
				want = []int{0}
			case 3:
				want = []int{1}
			case 2:
				want = []int{2}
			}
			if i == len(order)-1 {
				want = append(want, 3)
			}
			if !slices.Equal(append([]int{}, seen[i]...), want) {
				t.Fatalf("order %v: leaving layer %d completed buckets %v, want %v", order, l, seen[i], want)
			}
		}
	}
}

// Fused reductions train what reductions of each parameter alone train: the
// same bits for a pair (which sums elementwise in member order), and within
// float32 rounding for rings of 3 and 4, whose chunks then start at other
// members; with fewer reductions a step.
func TestFusedReductionsTrainAsReductionsAlone(t *testing.T) {
	checkLeaks(t)
	const steps = 4
	cfg := modelConfig(t, adamAdagrad)
	sizes := []int{3, 5, 4, 6}
	one, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		replicas int
		oneCPU   bool // whose backward computes the weight gradients from the first layer up
	}{{2, false}, {3, false}, {4, false}, {2, true}, {3, true}} {
		replicas := tc.replicas
		t.Run(fmt.Sprintf("%d replicas, one CPU thread %v", replicas, tc.oneCPU), func(t *testing.T) {
			train := func(fused bool) []*Worker {
				if !fused {
					old := fuseFloats
					fuseFloats = 0
					defer func() { fuseFloats = old }()
				}
				j := newJob(t, cfg, []Range{{0, 5}}, []int{replicas}, steps, ps.BSP)
				allreduceSharded(j)
				if tc.oneCPU {
					sharded := j.configure
					j.configure = func(c *Config, trs map[string]*wire.TCPTransport) {
						sharded(c, trs)
						c.Backend = one
					}
				}
				ws := j.workers(func(r int) func(context.Context, int64) (*data.Batch, error) {
					return fixedBatches(func(step int64) *data.Batch { return testBatch(30+uint64(r), uint64(step), sizes[r]) })
				})
				j.train(ws, 1, steps)
				return ws[0]
			}
			fused, alone := train(true), train(false)
			if n, dense := len(fused[0].local.buckets), len(fused[0].copies[0].dense); n >= dense || len(alone[0].local.buckets) != dense {
				t.Fatalf("%d reductions a step fused, %d alone, for %d dense parameters", n, len(alone[0].local.buckets), dense)
			}
			want := denseOf(t, [][]*Worker{alone})[0]
			for r, got := range denseOf(t, [][]*Worker{fused})[0] {
				for name, v := range got {
					if d := maxRelDiff(v, want[r][name]); (replicas == 2 && d != 0) || d > 1e-5 {
						t.Fatalf("replica %d: %s fused differs from alone by %g", r, name, d)
					}
				}
			}
		})
	}
}

func maxRelDiff(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		worst = max(worst, d/max(math.Abs(float64(b[i])), 1e-3))
	}
	return worst
}

// The next step's forward through a layer whose parameters a fused
// reduction of a lower layer holds waits for that reduction.
func TestTailWaitsForTheFusedReductionsOfALayer(t *testing.T) {
	own, fused := make(chan struct{}), make(chan struct{})
	tail := &stepTail{layers: map[int]chan struct{}{5: own}, covers: map[int][]chan struct{}{5: {fused}, 6: {fused}},
		done: make(chan struct{})}
	close(own)
	waited := make(chan error, 2)
	for _, layer := range []int{5, 6} {
		go func() { waited <- tail.waitLayer(context.Background(), layer) }()
	}
	select {
	case err := <-waited:
		t.Fatalf("a layer's wait ended (%v) before the fused reduction holding it", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(fused)
	for range 2 {
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
	}
	if err := tail.waitLayer(context.Background(), 4); err != nil {
		t.Fatalf("a layer without tail work: %v", err)
	}
}

// Fused reductions under overlapped steps train the bits of steps that do
// not overlap, in a sharded ring of 3 with unequal batches.
func TestFusedReductionsOverlapLikeSteps(t *testing.T) {
	checkLeaks(t)
	old := fuseFloats
	fuseFloats = 20 // the larger weights alone, beside a bucket, as in ctrdnn
	defer func() { fuseFloats = old }()
	const steps = 6
	cfg := modelConfig(t, adamAdagrad)
	sizes := []int{3, 5, 4}
	train := func(overlap bool) map[string][]float32 {
		j := newJobFrom(t, cfg, []Range{{0, 5}}, []int{3}, steps, ps.BSP, []bool{true}, "")
		j.lastStep = steps
		allreduceWith(j, true)
		shardOptimiser(j)
		overlapOn(j, overlap)
		ws := j.workers(func(r int) func(context.Context, int64) (*data.Batch, error) {
			return fixedBatches(func(step int64) *data.Batch { return testBatch(40+uint64(r), uint64(step), sizes[r]) })
		})
		j.train(ws, 1, steps)
		return denseOf(t, ws)[0][0]
	}
	want := train(false)
	for range 3 {
		for name, v := range train(true) {
			if !slices.Equal(v, want[name]) {
				t.Fatalf("%s: overlapped steps trained other bits", name)
			}
		}
	}
}
