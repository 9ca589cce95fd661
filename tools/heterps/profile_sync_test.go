package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

func foldProblem() *config.Problem {
	layer := func(oct float64) config.ProblemLayer {
		return config.ProblemLayer{OCT: []float64{9, oct}, ODT: []float64{1, 1}, Alpha: []float64{0.5, 0.9}, Beta: []float64{0, 0}}
	}
	return &config.Problem{Layers: []config.ProblemLayer{layer(0.002), layer(0.006)}}
}

// TestFoldSyncMakesTheColumnReproduceTheStageRuns: the measured type's
// oct add up to the 1-replica step, the time beyond the layers' compute
// goes to the layers by weight, alpha fits the k-replica steps, and the
// other types are left alone.
func TestFoldSyncMakesTheColumnReproduceTheStageRuns(t *testing.T) {
	p := foldProblem()
	runs := []*stageTimes{{k: 1, step: 0.012}, {k: 2, step: 0.009}}
	extra, alpha := foldSync(p, 1, []float64{3, 1}, runs)
	if math.Abs(extra-0.004) > 1e-12 {
		t.Errorf("extra %g, want 0.004 (0.012 step - 0.008 compute)", extra)
	}
	if got := []float64{p.Layers[0].OCT[1], p.Layers[1].OCT[1]}; math.Abs(got[0]-0.005) > 1e-9 || math.Abs(got[1]-0.007) > 1e-9 {
		t.Errorf("oct %v, want [0.005 0.007]: 3/4 and 1/4 of the 0.004 s added", got)
	}
	// 0.012 ((1-a) + a/2) = 0.009 -> a = 0.5
	if math.Abs(alpha-0.5) > 1e-9 || p.Layers[0].Alpha[1] != 0.5 || p.Layers[1].Alpha[1] != 0.5 {
		t.Errorf("alpha %g, layers %g %g, want 0.5", alpha, p.Layers[0].Alpha[1], p.Layers[1].Alpha[1])
	}
	if p.Layers[0].OCT[0] != 9 || p.Layers[0].Alpha[0] != 0.5 {
		t.Errorf("another type's column changed: %+v", p.Layers[0])
	}
}

func TestFoldSyncScalesWhenTheRuntimeIsFasterAndClampsAlpha(t *testing.T) {
	p := foldProblem()
	runs := []*stageTimes{{k: 1, step: 0.004}, {k: 2, step: 0.006}, {k: 4, step: 0.008}}
	_, alpha := foldSync(p, 1, []float64{1, 1}, runs)
	if got := p.Layers[0].OCT[1] + p.Layers[1].OCT[1]; math.Abs(got-0.004) > 1e-9 || math.Abs(p.Layers[1].OCT[1]-0.003) > 1e-9 {
		t.Errorf("oct %g + %g, want 0.001 + 0.003 (scaled to the 0.004 s step)", p.Layers[0].OCT[1], p.Layers[1].OCT[1])
	}
	// Predicted over measured, 0.004 (1 - a/2) / 0.006 and 0.004 (1 - 3a/4)
	// / 0.008, are 1 -+ 1/17 at a = -20/17 (-1 fits k = 2 alone and leaves
	// k = 4 1/8 off; -4/3 the other way round).
	if math.Abs(alpha-(-20.0/17)) > 1e-12 || p.Layers[0].Alpha[1] != round4(-20.0/17) {
		t.Errorf("alpha %g (layer %g) for steps that grow with k, want -20/17: more units slow this stage", alpha, p.Layers[0].Alpha[1])
	}
	for _, tc := range []struct {
		k2, want float64
	}{{0.1, config.MinAlpha}, {0.001, 1}} {
		if a := fitAlpha(0.004, []*stageTimes{{k: 2, step: tc.k2}}); a != tc.want {
			t.Errorf("2 replicas at %g s a step against 0.004: alpha %g, want %g (clamped)", tc.k2, a, tc.want)
		}
	}
}

// TestDescribeFitSaysWhenNoAlphaHolds: the profile reports each k's
// predicted step and measured/predicted ratio; steps of Amdahl's shape
// fit without a warning, as do steps that only rise (a negative alpha);
// steps slower at 4 replicas than at 2 (4 one-thread replicas on 2 CPUs)
// are named as time-shared and out of the formula's reach, and a misfit
// without such a turn (alpha clamped at 1) names none.
func TestDescribeFitSaysWhenNoAlphaHolds(t *testing.T) {
	amdahl := []*stageTimes{{k: 1, step: 0.012}, {k: 2, step: 0.009}, {k: 4, step: 0.0075}}
	lines := describeFit(amdahl, fitAlpha(0.012, amdahl[1:]), 1, 4)
	if len(lines) != 1 || !strings.Contains(lines[0], "k = 2: predicted 9.00 ms a step, measured 9.00 (measured/predicted samples/s 1.00)") ||
		!strings.Contains(lines[0], "k = 4: predicted 7.50 ms a step, measured 7.50 (measured/predicted samples/s 1.00)") {
		t.Errorf("steps of Amdahl's shape (alpha 0.5):\n%s", strings.Join(lines, "\n"))
	}
	shared := []*stageTimes{{k: 1, step: 0.01184}, {k: 2, step: 0.00704}, {k: 4, step: 0.00884}}
	alpha := fitAlpha(shared[0].step, shared[1:])
	lines = describeFit(shared, alpha, 1, 2)
	got := strings.Join(lines, "\n")
	for _, want := range []string{"(measured/predicted samples/s 1.22)", "(measured/predicted samples/s 0.78)",
		"k = 4: the replicas' 1 thread(s) each exceed this machine's 2 CPUs",
		"no alpha puts every k within 0.8-1.2", "(they fall to k = 2 and rise again: k = 4's step is 26 % longer)"} {
		if !strings.Contains(got, want) {
			t.Errorf("4 replicas slower than 2 on 2 CPUs (alpha %.4f): lacks %q:\n%s", alpha, want, got)
		}
	}
	rising := []*stageTimes{{k: 1, step: 0.004}, {k: 2, step: 0.006}, {k: 4, step: 0.008}}
	if got := strings.Join(describeFit(rising, fitAlpha(0.004, rising[1:]), 1, 4), "\n"); strings.Contains(got, "no alpha") {
		t.Errorf("steps that only rise, which a negative alpha fits within 1/17, reported as unfitted:\n%s", got)
	}
	superlinear := []*stageTimes{{k: 1, step: 0.012}, {k: 2, step: 0.004}}
	got = strings.Join(describeFit(superlinear, fitAlpha(0.012, superlinear[1:]), 1, 4), "\n")
	if !strings.Contains(got, "measured/predicted samples/s 1.50") || !strings.Contains(got, "and the measured ones do not; plans") {
		t.Errorf("2 replicas 3x faster than 1 (alpha clamped at 1): want 1.50 and no turn named:\n%s", got)
	}
	if gpu := strings.Join(describeFit(shared, alpha, 0, 2), "\n"); strings.Contains(gpu, "exceed this machine") {
		t.Errorf("replicas on GPUs (no CPU threads) called time-shared:\n%s", gpu)
	}
}

// TestProfileFoldsTheStageSynchronisation runs heterps profile with the
// stage measurement on: the file says what it folded, for each k and
// dense-sync method, replica 0 through the in-process shard and the others
// over the wire, and its measured column adds up to the measured step.
func TestProfileFoldsTheStageSynchronisation(t *testing.T) {
	for _, sync := range []string{"ps", "allreduce", "auto"} {
		t.Run(sync, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "p.toml")
			f, err := parseProfileFlags([]string{"--model", "ctrdnn", "--catalog", "../../config/examples/catalogs/local.toml",
				"--batch", "64", "--reps", "1", "--units", "1,2", "--sync-steps", "2", "--sync-rounds", "1", "--dense-sync", sync, "--out", out}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if err := profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
			src := mustRead(t, out)
			p, err := config.LoadProblem(out)
			if err != nil {
				t.Fatalf("profile output does not load: %v", err)
			}
			folded := sync
			if sync == "auto" {
				if !strings.Contains(src, "# dense_sync auto: at k = 2 a step took ") {
					t.Errorf("the file does not say how auto chose:\n%s", src)
				}
				folded = p.Types[0].DenseSync
			}
			for _, want := range []string{"# folded into oct and alpha: the synchronisation of dense_sync = " + folded,
				"# k = 1: ", "# k = 2: ", "replica 0 (PS local", "replica 1 (PS wire", "# alpha = ",
				"# the fit: k = 2: predicted "} {
				if !strings.Contains(src, want) {
					t.Errorf("the file lacks %q:\n%s", want, src)
				}
			}
			if folded == "allreduce" && !strings.Contains(src, "dense gradients by allreduce among the replicas") {
				t.Errorf("allreduce not named:\n%s", src)
			}
			if p.Types[0].Name != "cpu-1t" || p.Types[0].DenseSync != folded || (folded != "ps" && folded != "allreduce") {
				t.Errorf("type %s's dense_sync %q, want the folded method %q", p.Types[0].Name, p.Types[0].DenseSync, folded)
			}
		})
	}
}

func TestProfileRejectsAnUnknownDenseSync(t *testing.T) {
	if _, err := parseProfileFlags([]string{"--dense-sync", "nccl"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "nccl") {
		t.Errorf("--dense-sync nccl: %v", err)
	}
}

// TestStageRoundsKeepTheMedianRound: each k keeps its median round, and
// the rounds go round the ks (k = 1, 2, 1, 2, ...).
func TestStageRoundsKeepTheMedianRound(t *testing.T) {
	steps := map[int][]float64{1: {0.9, 0.1, 0.2}, 2: {0.05, 0.3, 0.04}}
	var order []int
	runs, err := stageRounds([]int{1, 2}, 3, func(k int) (*stageTimes, error) {
		order = append(order, k)
		s := steps[k][0]
		steps[k] = steps[k][1:]
		return &stageTimes{k: k, step: s}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].step != 0.2 || runs[1].step != 0.05 {
		t.Errorf("kept %g and %g, want the medians 0.2 and 0.05", runs[0].step, runs[1].step)
	}
	if want := []int{1, 2, 1, 2, 1, 2}; !slices.Equal(order, want) {
		t.Errorf("ran k in order %v, want %v", order, want)
	}
}

// unitsOnGPUs keeps the unit counts whose replicas the machine has GPUs
// for, from the first GPU on, and refuses a first GPU it lacks.
func TestUnitsOnGPUs(t *testing.T) {
	two := func() (int, error) { return 2, nil }
	for _, tc := range []struct {
		units []int
		first int
		want  []int
	}{
		{[]int{1, 2, 4}, 0, []int{1, 2}},
		{[]int{1, 2}, 1, []int{1}},
		{[]int{1}, 0, []int{1}},
	} {
		got, err := unitsOnGPUs(tc.units, tc.first, two)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("units %v from GPU %d of 2: %v, %v; want %v", tc.units, tc.first, got, err, tc.want)
		}
	}
	if _, err := unitsOnGPUs([]int{1}, 2, two); err == nil || !strings.Contains(err.Error(), "GPU 2 is not on this machine (it has 2)") {
		t.Errorf("GPU 2 of 2: %v", err)
	}
	if _, err := unitsOnGPUs([]int{1}, 0, func() (int, error) { return 0, errNoCUDA }); err == nil || !strings.Contains(err.Error(), "listing the GPUs") {
		t.Errorf("no GPU list: %v", err)
	}
}

// A stage run opens each replica's unit through its setup's backend, one
// per replica in replica order, and releases them all when it ends; GPU
// units are GPU first+i (a build without CUDA refuses them, naming the GPU).
func TestStageRunOpensAUnitPerReplica(t *testing.T) {
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	var opened []int
	released := 0
	setup := stageSetup{model: cfg, data: "synthetic:1", batch: 64, denseSync: config.DenseSyncPS, warmup: 1, steps: 1,
		backend: func(i int) (native.Backend, func(), error) {
			opened = append(opened, i)
			b, err := native.NewCPU(native.CPUOptions{Threads: 1})
			return b, func() { released++ }, err
		}}
	if _, err := stageRun(context.Background(), setup, 2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(opened, []int{0, 1}) || released != 2 {
		t.Errorf("opened units %v, released %d; want [0 1] and 2", opened, released)
	}
	if cudaBuild {
		return
	}
	if _, _, err := gpuUnits(3)(1); err == nil || !strings.Contains(err.Error(), "GPU 4") || !errors.Is(err, errNoCUDA) {
		t.Errorf("gpuUnits(3)(1) without CUDA: %v, want errNoCUDA naming GPU 4", err)
	}
}

// syncRuns folds the method asked for, or for auto allreduce when its step
// at the most replicas was 5 % shorter (else ps; with one replica only
// allreduce, a ring of one, is run), and says how auto chose.
func TestSyncRunsChoosesTheFasterForAuto(t *testing.T) {
	steps := func(k1, k2 float64) []*stageTimes { return []*stageTimes{{k: 1, step: k1}, {k: 2, step: k2}} }
	for _, tc := range []struct {
		name, asked string
		ps, ar      []*stageTimes
		want        string
	}{
		{"allreduce faster", "auto", steps(0.010, 0.008), steps(0.011, 0.006), "allreduce"},
		{"ps faster", "auto", steps(0.010, 0.006), steps(0.009, 0.007), "ps"},
		{"allreduce within the margin", "auto", steps(0.010, 0.0060), steps(0.010, 0.0058), "ps"},
		{"one replica", "auto", steps(0.010, 0)[:1], steps(0.011, 0)[:1], "allreduce"},
		{"asked ps", "ps", steps(0.010, 0.008), steps(0.011, 0.006), "ps"},
		{"asked allreduce", "allreduce", steps(0.010, 0.006), steps(0.011, 0.009), "allreduce"},
	} {
		var ran []string
		several := len(tc.ps) > 1
		method, runs, lines, err := syncRuns(tc.asked, several, func(m string) ([]*stageTimes, error) {
			ran = append(ran, m)
			if m == "ps" {
				return tc.ps, nil
			}
			return tc.ar, nil
		})
		want := tc.ps
		if tc.want == "allreduce" {
			want = tc.ar
		}
		if err != nil || method != tc.want || &runs[0] != &want[0] {
			t.Errorf("%s: folded %s (%v), want %s and its runs", tc.name, method, err, tc.want)
		}
		if tc.asked == "auto" && ((several && len(ran) != 2) || (!several && len(ran) != 1) || len(lines) != 1 || !strings.Contains(lines[0], "folded: "+tc.want)) {
			t.Errorf("%s: ran %v, said %q", tc.name, ran, lines)
		}
		if tc.asked != "auto" && (len(ran) != 1 || ran[0] != tc.asked || lines != nil) {
			t.Errorf("%s: ran %v, said %q; want only %s, silently", tc.name, ran, lines, tc.asked)
		}
	}
}

// The profile's replicas run as node daemons run them: one replica whose
// server is in its process does not overlap its steps, several do.
func TestStageRunOverlapsStepsAsNodesDo(t *testing.T) {
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	setup := stageSetup{model: cfg, data: "synthetic:1", batch: 64, denseSync: config.DenseSyncPS, warmup: 1, steps: 1,
		backend: func(int) (native.Backend, func(), error) {
			b, err := native.NewCPU(native.CPUOptions{Threads: 1})
			return b, func() {}, err
		}}
	for _, k := range []int{1, 2} {
		ctx, cancel := context.WithCancel(context.Background())
		r := &stageRunner{setup: setup, k: k}
		err := r.startShard(ctx)
		if err == nil {
			err = r.startWorkers()
		}
		for i, w := range r.workers {
			if got := w.OverlapsSteps(); got != (k > 1) {
				t.Errorf("%d replicas: replica %d overlaps steps %v, want %v", k, i, got, k > 1)
			}
		}
		cancel()
		r.close()
		if err != nil {
			t.Fatalf("%d replicas: %v", k, err)
		}
	}
}
