package pipeline

import (
	"context"
	"errors"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// Two stages over loopback TCP, one replica each, parameters on two BSP
// parameter-server shards: the parameters and every step's loss are
// bit-identical to single-process training on the same batches (tolerance
// 0). Same kernels, same summation order: the activation's parts cross the
// wire as separate tensors so that the FC layer multiplies them as it does
// in one process, and a single replica's weight is exactly 1.
func TestTwoStagesEqualSingleProcessBitForBit(t *testing.T) {
	checkLeaks(t)
	const steps, size = 5, 6
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), size) }

	j := newJob(t, cfg, []Range{{0, 2}, {3, 5}}, []int{1, 1}, steps, ps.BSP)
	losses := j.run(func(int) func(context.Context, int64) (*data.Batch, error) { return fixedBatches(batch) })
	ref, refLosses := reference(t, cfg, steps, batch)

	if !slices.Equal(losses[0], refLosses) {
		t.Fatalf("losses %v, single-process %v", losses[0], refLosses)
	}
	if d := j.maxDiff(ref); d != 0 {
		t.Fatalf("parameters differ from single-process training by up to %g, want bit-identical", d)
	}
}

// Models from the zoo on their kind of data, bit-identical to
// single-process training: ctrdnn (26 slots, a 1M-row table, FC
// 512-256-128-32-1, Adam) on synthetic Criteo-like data split after the
// concat layer; the digits MLP (dense input, softmax over classes, which
// travel with the activations) split after its first FC; the two-tower
// matchnet, which runs only as a single stage; and the word-embedding nce
// model split before its NCE output layer, whose sparse table the second
// stage pulls row by row (targets and the negatives drawn from the batch as
// read, not as renumbered).
func TestZooModelsBitForBit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 1M-row tables several times; skipped with -short")
	}
	checkLeaks(t)
	for _, tc := range []struct {
		model, data string
		stages      []Range
	}{
		{"ctrdnn", "synthetic:5", []Range{{0, 1}, {2, 6}}},
		{"mlp-digits", "digits:../data/testdata/digits.csv.gz", []Range{{0, 1}, {2, 3}}},
		{"matchnet", "pairs:3", []Range{{0, 6}}},
		{"nce", "words:3", []Range{{0, 0}, {1, 1}}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			const steps, size = 3, 32
			cfg, err := config.LoadModel(tc.model)
			if err != nil {
				t.Fatal(err)
			}
			batches, ids := readBatches(t, cfg, tc.data, steps, size)
			batch := func(step int64) *data.Batch { return batches[step-1] }
			replicas := make([]int, len(tc.stages))
			for i := range replicas {
				replicas[i] = 1
			}
			j := newJob(t, cfg, tc.stages, replicas, steps, ps.BSP)
			losses := j.run(func(int) func(context.Context, int64) (*data.Batch, error) {
				return func(_ context.Context, step int64) (*data.Batch, error) {
					if step > steps { // the prefetch past the end
						return nil, io.EOF
					}
					return batch(step), nil
				}
			})
			ref, refLosses := reference(t, cfg, steps, batch)
			if !slices.Equal(losses[0], refLosses) {
				t.Fatalf("losses %v, single-process %v", losses[0], refLosses)
			}
			ids = append(ids, nceRows(ref, batches)...) // the NCE table's rows the steps touched
			if d := j.maxDiff(ref, ids...); d != 0 {
				t.Fatalf("parameters differ from single-process training by up to %g, want bit-identical", d)
			}
		})
	}
}

// nceRows returns the NCE table rows (targets and negatives) that the
// batches touch in m, if it has an NCE layer.
func nceRows(m *nn.Model, batches []*data.Batch) []int64 {
	var out []int64
	for i := range m.NumLayers() {
		if l, ok := m.Layer(i).(*nn.NCE); ok {
			for _, b := range batches {
				out = append(out, l.Rows(b)...)
			}
		}
	}
	return out
}

// readBatches reads steps batches from a data spec and returns them with
// the distinct ids they hold, ascending.
func readBatches(t *testing.T, cfg *config.Model, spec string, steps, size int) ([]*data.Batch, []int64) {
	t.Helper()
	src, err := data.Open(spec, data.Options{Vocab: cfg.Input.Vocab})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var batches []*data.Batch
	seen := map[int64]bool{}
	for range steps {
		b, err := src.Next(context.Background(), size)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
		for _, id := range b.IDs {
			seen[id] = true
		}
	}
	return batches, slices.Sorted(maps.Keys(seen))
}

// Data-parallel replicas with different batch sizes: BSP with weights
// b_k / sum(b) equals single-process training on the stacked batch. The
// pipeline also crosses replica counts both ways (2 -> 1 stacks rows, 1 ->
// 2 splits them). Tolerance 2e-6 absolute after 4 SGD-momentum steps:
// the per-replica mean losses (1/3, 1/5) and the float32 weights 3/8, 5/8
// round differently from the one mean over 8 rows, so the gradients agree
// to float32 rounding, not bit for bit.
func TestReplicasWithUnequalBatchesEqualStackedBatch(t *testing.T) {
	checkLeaks(t)
	const steps, tolerance = 4, 2e-6
	cfg := modelConfig(t, sgdMomentum)
	cases := []struct {
		name     string
		stages   []Range
		replicas []int
		sizes    []int // stage 0 replicas' batch sizes
	}{
		{"one stage, 2 replicas", []Range{{0, 5}}, []int{2}, []int{3, 5}},
		{"2 replicas stacked into 1", []Range{{0, 3}, {4, 5}}, []int{2, 1}, []int{3, 5}},
		{"1 replica split into 2", []Range{{0, 2}, {3, 5}}, []int{1, 2}, []int{8}},
	}
	stacked := func(step int64) *data.Batch {
		b, err := concatBatches([]*data.Batch{testBatch(10, uint64(step), 3), testBatch(11, uint64(step), 5)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ref, _ := reference(t, cfg, steps, stacked)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, cfg, tc.stages, tc.replicas, steps, ps.BSP)
			j.run(func(r int) func(context.Context, int64) (*data.Batch, error) {
				if len(tc.sizes) == 1 {
					return fixedBatches(stacked)
				}
				return fixedBatches(func(step int64) *data.Batch { return testBatch(10+uint64(r), uint64(step), tc.sizes[r]) })
			})
			d := j.maxDiff(ref)
			t.Logf("largest difference from single-process training: %g", d)
			if d > tolerance || math.IsNaN(d) {
				t.Fatalf("parameters differ from single-process training by %g, tolerance %g", d, tolerance)
			}
		})
	}
}

// Micro-batches flow through the stages one after another and their
// gradients are combined weighted by rows: the result equals
// single-process training on the whole batch to float32 rounding
// (tolerance 2e-6 absolute after 4 steps; the sums of micro-batch means
// round differently from one mean).
func TestMicroBatchesEqualWholeBatch(t *testing.T) {
	checkLeaks(t)
	const steps, tolerance = 4, 2e-6
	cfg := modelConfig(t, sgdMomentum)
	batch := func(step int64) *data.Batch { return testBatch(30, uint64(step), 8) }
	ref, refLosses := reference(t, cfg, steps, batch)
	for _, tc := range []struct {
		name     string
		replicas []int
		micro    int
	}{
		{"3 micro-batches", []int{1, 1}, 3},
		{"2 micro-batches split over 2 replicas", []int{1, 2}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, cfg, []Range{{0, 2}, {3, 5}}, tc.replicas, steps, ps.BSP)
			j.micro = tc.micro
			losses := j.run(func(int) func(context.Context, int64) (*data.Batch, error) { return fixedBatches(batch) })
			d := j.maxDiff(ref)
			t.Logf("largest difference from single-process training: %g", d)
			if d > tolerance || math.IsNaN(d) {
				t.Fatalf("parameters differ from single-process training by %g, tolerance %g", d, tolerance)
			}
			if len(tc.replicas) == 2 && tc.replicas[1] == 1 {
				for i, l := range losses[0] {
					if math.Abs(l-refLosses[i]) > 1e-6 {
						t.Fatalf("step %d: loss %v, single-process %v", i+1, l, refLosses[i])
					}
				}
			}
		})
	}
}

// A downstream peer that dies mid-step ends the upstream worker's step with
// an error at once; one that goes silent (SIGSTOPped, say) ends it at the
// step timeout. Either error names the partner. No
// goroutine outlives the test.
func TestPeerFailureEndsTheStep(t *testing.T) {
	checkLeaks(t)
	cfg := modelConfig(t, adamAdagrad)
	batches := fixedBatches(func(step int64) *data.Batch { return testBatch(1, uint64(step), 4) })
	for _, tc := range []struct {
		name    string
		kill    bool
		timeout time.Duration
		want    error
	}{
		{"killed", true, 20 * time.Second, wire.ErrClosed},
		{"silent", false, 3 * time.Second, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, cfg, []Range{{0, 2}, {3, 5}}, []int{1, 1}, 1, ps.BSP)
			trs := j.transports()
			w := j.worker(trs, 0, 0, batches, tc.timeout)
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := w.Step(context.Background(), 1)
				done <- err
			}()
			// Stand in for stage 1: take the activation, then die or stay silent.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := trs[nodeID(1, 0)].Recv(ctx, nodeID(0, 0), EdgeStream(0, 0, 0))
			if err != nil {
				t.Fatal(err)
			}
			if m.Type != wire.MsgActivation || m.Meta.Step != 1 {
				t.Fatalf("stage 1 got %v for step %d", m.Type, m.Meta.Step)
			}
			m.Release()
			if tc.kill {
				trs[nodeID(1, 0)].Close()
			}
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), nodeID(1, 0)) {
					t.Fatalf("step error %v, want one wrapping %v and naming the partner %s", err, tc.want, nodeID(1, 0))
				}
				t.Logf("step failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
			case <-time.After(tc.timeout + 5*time.Second):
				t.Fatal("the step hangs after its peer failed")
			}
		})
	}
}

func TestPartnersCoverBothStagesEvenly(t *testing.T) {
	for r := 1; r <= 5; r++ {
		for n := 1; n <= 5; n++ {
			down := map[int][]int{}
			for j := range r {
				ks := Partners(j, r, n)
				if len(ks) == 0 {
					t.Fatalf("r=%d n=%d: replica %d has no partner", r, n, j)
				}
				for _, k := range ks {
					down[k] = append(down[k], j)
				}
			}
			for k := range n {
				if !slices.Equal(down[k], Partners(k, n, r)) {
					t.Fatalf("r=%d n=%d: replica %d of the next stage hears from %v, its Partners say %v", r, n, k, down[k], Partners(k, n, r))
				}
				if len(down[k]) > 1 && len(Partners(down[k][0], r, n)) > 1 {
					t.Fatalf("r=%d n=%d: an edge both stacks and splits rows", r, n)
				}
			}
		}
	}
}

// In ASP the replicas never wait for each other: every push is applied on
// arrival, so after the run each block has taken one update per replica
// and step, and training still lowers the loss on the last stage.
func TestASPAppliesEveryPush(t *testing.T) {
	checkLeaks(t)
	const steps = 6
	cfg := modelConfig(t, adamAdagrad)
	j := newJob(t, cfg, []Range{{0, 3}, {4, 5}}, []int{2, 1}, steps, ps.ASP)
	losses := j.run(func(r int) func(context.Context, int64) (*data.Batch, error) {
		return fixedBatches(func(int64) *data.Batch { return testBatch(20+uint64(r), 1, 4+r) })
	})
	for _, name := range []string{"fc3.weight", "fc5.bias"} {
		want := int64(2 * steps) // stage 0: two replicas
		if name == "fc5.bias" {
			want = steps
		}
		s := j.shards[ps.BlockShard(name, psShards)]
		if v, err := s.Version(name); err != nil || v != want {
			t.Fatalf("%s at version %d (%v), want %d pushes applied", name, v, err, want)
		}
	}
	if l := losses[0]; l[len(l)-1] >= l[0] {
		t.Fatalf("loss on a repeated batch went from %v to %v", l[0], l[len(l)-1])
	}
}

func TestNewWorkerRefusesBadConfigs(t *testing.T) {
	cfg := modelConfig(t, adamAdagrad)
	link := []Link{{Peer: "x", Stream: 1}}
	batches := fixedBatches(func(int64) *data.Batch { return nil })
	base := func() Config {
		return Config{Job: testJob, Stages: 2, Layers: Range{0, 2}, Model: buildModel(t, cfg),
			Backend: native.MustCPU(), PS: &ps.Client{}, Next: link, Batches: batches}
	}
	for name, change := range map[string]func(*Config){
		"no model":               func(c *Config) { c.Model = nil },
		"range past the model":   func(c *Config) { c.Layers = Range{3, 6} },
		"reversed range":         func(c *Config) { c.Layers = Range{2, 1} },
		"stage 0 with upstream":  func(c *Config) { c.Prev = link },
		"middle stage, no next":  func(c *Config) { c.Next = nil },
		"stage 0 without data":   func(c *Config) { c.Batches = nil },
		"parameters without PS":  func(c *Config) { c.PS = nil },
		"stage beyond the count": func(c *Config) { c.Stage = 2 },
		"too many micro-batches": func(c *Config) { c.MicroBatches = MaxMicroBatches + 1 },
		"unknown schedule":       func(c *Config) { c.Schedule = "gpipe" },
		"negative lookahead":     func(c *Config) { c.Lookahead = -1 },
		"lookahead too far":      func(c *Config) { c.Lookahead = MaxMicroBatches + 1 },
	} {
		c := base()
		change(&c)
		if _, err := NewWorker(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	w, err := NewWorker(base())
	if err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	w.Close()
}

// TestNothingPulledAheadPastTheLastStep: a worker told the job's last step
// pulls no rows for the step after it (pulls create rows, and a checkpoint
// of the last step would hold them), while one not told does.
func TestNothingPulledAheadPastTheLastStep(t *testing.T) {
	checkLeaks(t)
	const steps, size = 3, 5
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(4, uint64(step), size) }
	// rows trains the job and returns the rows the servers hold once they
	// exceed atLeast, or after a second.
	rows := func(lastStep, atLeast int) int {
		j := newJob(t, cfg, []Range{{0, 5}}, []int{1}, steps, ps.BSP)
		j.lastStep = lastStep
		ws := j.workers(func(int) func(context.Context, int64) (*data.Batch, error) { return fixedBatches(batch) })
		j.train(ws, 1, steps)
		n := 0
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			n = 0
			for _, s := range j.shards {
				n += s.Rows()
			}
			if n > atLeast {
				break
			}
		}
		return n
	}
	want := 0
	for _, slots := range [][2]int{{0, 2}, {2, 4}} { // the two tables' slot ranges
		seen := map[int64]bool{}
		for step := int64(1); step <= steps; step++ {
			b := batch(step)
			for j := 0; j+1 < len(b.Offsets); j++ {
				if slot := j % b.Slots; slot >= slots[0] && slot < slots[1] {
					for _, id := range b.IDs[b.Offsets[j]:b.Offsets[j+1]] {
						seen[id] = true
					}
				}
			}
		}
		want += len(seen)
	}
	if got := rows(steps, want); got != want {
		t.Errorf("told the last step: %d rows on the servers, want the %d ids of steps 1..%d", got, want, steps)
	}
	if got := rows(0, want); got <= want {
		t.Errorf("not told the last step: %d rows, want more than %d (the next batch's, pulled ahead)", got, want)
	}
}
