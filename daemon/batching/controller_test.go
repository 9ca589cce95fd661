package batching

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func testConfig() Config {
	return Config{Interval: 5, Smoothing: 0.3, Deadband: 0.02, MinBatch: 1}
}

const ms = 1e-3

// TestConvergence: from uniform or wildly-off starts, on t_k = c_k·b_k + o_k,
// the split is within 5% of the balance in at most 3 adjustments.
func TestConvergence(t *testing.T) {
	tests := []struct {
		name     string
		global   int
		perMs    []float64 // c_k in ms per sample
		overhead []float64 // o_k in s per step
		start    []int
	}{
		{"uniform, 2x, no overhead", 1200, []float64{1, 2}, nil, []int{600, 600}},
		{"uniform, 4 types", 1200, []float64{1, 4, 2, 8}, nil, []int{300, 300, 300, 300}},
		{"upside down, 8x", 1200, []float64{1, 8}, nil, []int{10, 1190}},
		{"uniform, 4x, overhead 30% of a step", 1200, []float64{1, 4}, []float64{0.15, 0.15}, []int{600, 600}},
		{"uniform, unequal overheads", 1200, []float64{1, 2, 3}, []float64{0.05, 0.01, 0.03}, []int{400, 400, 400}},
		{"1:119, equal speeds, overhead 10%", 1200, []float64{1, 1}, []float64{0.06, 0.06}, []int{1190, 10}},
		{"1:119 the wrong way, 6x, overhead 10%", 1400, []float64{1, 6}, []float64{0.12, 0.12}, []int{10, 1390}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := scaled(tt.perMs, ms)
			target := balanced(tt.global, c, tt.overhead)
			sim := mustSimulate(t, mustController(t, testConfig()), tt.start, 100, LinearTimes(c, tt.overhead))
			n := adjustmentsToReach(sim, target)
			if n < 0 || n > 3 {
				t.Errorf("reached %.1f after %d adjustments (-1: never); splits %v", target, n, sim.AdjustmentBatches())
			}
		})
	}
}

// TestConvergenceRandom: the same on random speeds (up to 8x apart) and
// random starts: any start without overhead; with overheads up to 10% of the
// balanced step, starts up to 10x off the uniform share (the update removes
// about o_k/t_k of a replica's error per adjustment, so a replica started far
// below its balance, where the overhead dominates its time, needs more).
func TestConvergenceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 400 {
		n := 2 + rng.IntN(5)
		global := 100*n + rng.IntN(2000)
		c, o := make([]float64, n), make([]float64, n)
		for k := range c {
			c[k] = ms * (1 + 7*rng.Float64())
		}
		step := balanced(global, c, nil)[0] * c[0]
		minStart := 1
		if i%2 == 1 {
			for k := range o {
				o[k] = 0.1 * step * rng.Float64()
			}
			minStart = global / n / 10
		}
		start := randomStart(t, rng, global, n, minStart)
		sim := mustSimulate(t, mustController(t, testConfig()), start, 60, LinearTimes(c, o))
		target := balanced(global, c, o)
		if got := adjustmentsToReach(sim, target); got < 0 || got > 3 {
			t.Fatalf("case %d: c %v o %v from %v: reached %.1f after %d adjustments; splits %v",
				i, c, o, start, target, got, sim.AdjustmentBatches())
		}
	}
}

func randomStart(t *testing.T, rng *rand.Rand, global, n, minBatch int) []int {
	w := make([]float64, n)
	for k := range w {
		w[k] = math.Exp(2 * rng.NormFloat64())
	}
	start, err := Split(global, w, Bounds{Min: minBatch}.mustMin(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	return start
}

func (b Bounds) mustMin(n int) []int {
	min, _, _ := b.perReplica(n)
	return min
}

// TestNoUpdateFailsConvergence: with the proportional update switched off
// (gain 0) the convergence check above reports failure, so it tests the
// update and not the simulation.
func TestNoUpdateFailsConvergence(t *testing.T) {
	ctl := mustController(t, testConfig())
	ctl.gain = 0
	c := []float64{1 * ms, 4 * ms}
	sim := mustSimulate(t, ctl, []int{600, 600}, 100, LinearTimes(c, nil))
	if got := adjustmentsToReach(sim, balanced(1200, c, nil)); got >= 0 {
		t.Fatalf("without the update the split reached the balance after %d adjustments", got)
	}
}

// TestDeadband: a 3% imbalance is left alone under a 5% deadband and
// corrected under a 2% one.
func TestDeadband(t *testing.T) {
	times := LinearTimes([]float64{1 * ms, 1.03 * ms}, nil)
	cfg := testConfig()
	cfg.Deadband = 0.05
	sim := mustSimulate(t, mustController(t, cfg), []int{500, 500}, 100, times)
	if sim.Adjustments != 0 {
		t.Fatalf("inside the deadband: %d adjustments, splits %v", sim.Adjustments, sim.AdjustmentBatches())
	}
	checks := 0
	for _, st := range sim.Steps {
		if st.Decision.Reason == InsideDeadband {
			checks++
			if math.Abs(st.Decision.MaxError-0.03/2.03) > 1e-9 {
				t.Errorf("step %d: max error %v, want %v", st.Step, st.Decision.MaxError, 0.03/2.03)
			}
		}
	}
	if checks != 100/cfg.Interval {
		t.Errorf("%d deadband decisions in 100 steps, want one per interval (%d)", checks, 100/cfg.Interval)
	}
	cfg.Deadband = 0.01
	sim = mustSimulate(t, mustController(t, cfg), []int{500, 500}, 100, times)
	if sim.Adjustments == 0 {
		t.Fatal("outside the deadband: no adjustment")
	}
}

// TestBoundsAndSumAlwaysHold runs the controller on random speeds, noise,
// bounds and speed changes, and checks every step's split.
func TestBoundsAndSumAlwaysHold(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		n := 1 + rng.IntN(6)
		cfg := testConfig()
		cfg.Interval = 1 + rng.IntN(5)
		cfg.Smoothing = 0.9 * rng.Float64()
		cfg.MinBatch = 1 + rng.IntN(30)
		cfg.MaxBatch = make([]int, n)
		sumMax := 0
		for k := range cfg.MaxBatch {
			cfg.MaxBatch[k] = cfg.MinBatch + rng.IntN(500)
			sumMax += cfg.MaxBatch[k]
		}
		global := n*cfg.MinBatch + rng.IntN(sumMax-n*cfg.MinBatch+1)
		start, err := Split(global, make([]float64, n), Bounds{Min: cfg.MinBatch}.mustMin(n), cfg.MaxBatch)
		if err != nil {
			t.Fatal(err)
		}
		c := make([]float64, n)
		for k := range c {
			c[k] = ms * math.Exp(rng.NormFloat64())
		}
		noisy := func(step int64, b []int) []float64 {
			times := LinearTimes(c, nil)(step, b)
			for k := range times {
				times[k] *= 1 + 0.2*rng.NormFloat64()
				if rng.IntN(50) == 0 {
					times[k] = []float64{0, -1, math.NaN(), math.Inf(1)}[rng.IntN(4)]
				}
			}
			if step%37 == 0 {
				c[rng.IntN(n)] *= 4
			}
			return times
		}
		sim := mustSimulate(t, mustController(t, cfg), start, 150, noisy)
		for _, st := range sim.Steps {
			checkSplit(t, global, st.Batches, Bounds{Min: cfg.MinBatch}.mustMin(n), cfg.MaxBatch)
		}
	}
}

// TestTracksStepChange: replica 1 becomes 4x slower at adjustment 4 and
// recovers at adjustment 12; each time the split is within 5% of the new
// balance in at most 3 adjustments, moving monotonically toward it.
func TestTracksStepChange(t *testing.T) {
	const global, slowFrom, slowTo = 1200, 4, 12
	cfg := testConfig()
	base := []float64{1 * ms, 1 * ms, 2 * ms}
	overhead := []float64{0.02, 0.02, 0.02}
	slow := slices.Clone(base)
	slow[1] *= 4
	times := func(step int64, b []int) []float64 {
		window := int(step) / cfg.Interval
		if window >= slowFrom && window < slowTo {
			return LinearTimes(slow, overhead)(step, b)
		}
		return LinearTimes(base, overhead)(step, b)
	}
	sim := mustSimulate(t, mustController(t, cfg), []int{400, 400, 400}, 20*cfg.Interval, times)
	perWindow := make([][]int, 20)
	for w := range perWindow {
		perWindow[w] = sim.Steps[w*cfg.Interval].Batches
	}
	checkTracking(t, perWindow[0:slowFrom], balanced(global, base, overhead))
	checkTracking(t, perWindow[slowFrom:slowTo], balanced(global, slow, overhead))
	checkTracking(t, perWindow[slowTo:], balanced(global, base, overhead))
}

// checkTracking: within 3 windows the split is near target, and each
// replica's batch moves toward it without crossing it by more than 5%.
func checkTracking(t *testing.T, splits [][]int, target []float64) {
	t.Helper()
	if !near(splits[min(3, len(splits)-1)], target) {
		t.Errorf("target %.1f not reached in 3 adjustments: %v", target, splits)
	}
	for i := 1; i < len(splits); i++ {
		for k, b := range splits[i] {
			prev, now := float64(splits[i-1][k])-target[k], float64(b)-target[k]
			overshoot := prev*now < 0 && math.Abs(now) > math.Max(0.05*target[k], 1)
			if math.Abs(now) > math.Abs(prev)+1 || overshoot {
				t.Errorf("replica %d moved from %d to %d, target %.1f (splits %v)", k, splits[i-1][k], b, target[k], splits)
			}
		}
	}
}

func TestSmoothing(t *testing.T) {
	cfg := Config{Interval: 3, Smoothing: 0.5, MinBatch: 1}
	ctl := mustController(t, cfg)
	samples := [][]float64{{1, 2}, {2, 2}, {4, 2}} // replica 0's EMA: 1, 1.5, 2.75
	var why Decision
	for s, secs := range samples {
		_, _, why = ctl.Observe(int64(s), nil, []int{100, 100}, secs)
	}
	if why.Reason != Adjusted {
		t.Fatalf("reason %q, want %q", why.Reason, Adjusted)
	}
	r := why.Replicas[0]
	if r.Seconds != 2.75 || r.Throughput != 100/2.75 || r.Samples != 3 {
		t.Errorf("replica 0: t %v X %v samples %d; want the EMA 2.75, 100/2.75 and 3", r.Seconds, r.Throughput, r.Samples)
	}
	if why.MeanTime != 2.375 {
		t.Errorf("mean time %v, want 2.375", why.MeanTime)
	}
	// b ∝ 100/2.75 : 100/2 → 84.2 : 115.8
	if got := []int{why.Replicas[0].Batch, why.Replicas[1].Batch}; !slices.Equal(got, []int{84, 116}) {
		t.Errorf("batches %v, want [84 116]", got)
	}
}

func TestIgnoresBadTimes(t *testing.T) {
	ctl := mustController(t, Config{Interval: 2, Deadband: 0.05, MinBatch: 1})
	_, _, why := ctl.Observe(0, nil, []int{100, 100}, []float64{math.NaN(), 1})
	if len(why.Notes) != 1 || !strings.Contains(why.Notes[0], "replica 0: compute time NaN ignored") {
		t.Errorf("notes %q: want the NaN of replica 0 named", why.Notes)
	}
	next, changed, why := ctl.Observe(1, nil, []int{100, 100}, []float64{-1, 1})
	if changed || why.Reason != WarmingUp || !slices.Equal(next, []int{100, 100}) {
		t.Fatalf("no valid time for replica 0: changed %v reason %q next %v", changed, why.Reason, next)
	}
	if !strings.Contains(strings.Join(why.Notes, "; "), "replica 0: no valid compute time in the last 2 steps") {
		t.Errorf("notes %q", why.Notes)
	}
	// After a window without a valid time the next decision waits a whole
	// interval, so that it does not rest on one sample.
	if _, changed, why = ctl.Observe(2, nil, []int{100, 100}, []float64{3, 1}); changed || why.Reason != WarmingUp {
		t.Fatalf("step 2: changed %v reason %q; want warming up", changed, why.Reason)
	}
	_, changed, why = ctl.Observe(3, nil, []int{100, 100}, []float64{0, 1})
	if !changed {
		t.Fatalf("with a valid time the window adjusts: reason %q", why.Reason)
	}
	if why.Replicas[0].Seconds != 3 || why.Replicas[0].Samples != 1 {
		t.Errorf("replica 0: %+v; want only the valid sample 3", why.Replicas[0])
	}
}

func TestSingleReplica(t *testing.T) {
	ctl := mustController(t, Config{Interval: 1, MinBatch: 1})
	for s := range int64(5) {
		next, changed, why := ctl.Observe(s, nil, []int{64}, []float64{float64(s + 1)})
		if changed || why.Reason != SingleReplica || !slices.Equal(next, []int{64}) {
			t.Fatalf("step %d: changed %v reason %q next %v", s, changed, why.Reason, next)
		}
	}
}

// TestResets: a new replica set or a step that goes back starts the window
// again, as does a split the controller did not choose: the next adjustment
// comes a whole interval after it.
func TestResets(t *testing.T) {
	tests := []struct {
		name    string
		step    int64 // of the observation that resets
		ids     []int
		batches []int
		note    string
	}{
		{"replica set", 2, []int{0, 2}, []int{100, 100}, "replica set changed from [0 1] to [0 2]"},
		{"step back", 1, []int{0, 1}, []int{100, 100}, "step 1 is not after step 1"},
		{"split changed elsewhere", 2, []int{0, 1}, []int{120, 80}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctl := mustController(t, Config{Interval: 3, MinBatch: 1})
			ctl.Observe(0, []int{0, 1}, []int{100, 100}, []float64{1, 2})
			ctl.Observe(1, []int{0, 1}, []int{100, 100}, []float64{1, 2})
			for i := range int64(3) {
				_, changed, why := ctl.Observe(tt.step+i, tt.ids, tt.batches, []float64{1, 2})
				if i == 0 && tt.note != "" && (len(why.Notes) != 1 || !strings.Contains(why.Notes[0], tt.note)) {
					t.Errorf("notes %q, want %q", why.Notes, tt.note)
				}
				if want := i == 2; changed != want || why.Replicas[0].Samples != int(i)+1 {
					t.Fatalf("observation %d after the reset: changed %v (want %v), %d samples", i, changed, want, why.Replicas[0].Samples)
				}
			}
		})
	}
}

func TestHeldByBounds(t *testing.T) {
	ctl := mustController(t, Config{Interval: 1, MinBatch: 1, MaxBatch: []int{100, 200}})
	next, changed, why := ctl.Observe(0, nil, []int{100, 100}, []float64{0.1, 0.4})
	if changed || why.Reason != HeldByBounds || !slices.Equal(next, []int{100, 100}) {
		t.Fatalf("the faster replica is at its max: changed %v reason %q next %v", changed, why.Reason, next)
	}
}

func TestRefusesBadObservations(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		ids     []int
		batches []int
		secs    []float64
		want    string
	}{
		{"no replicas", testConfig(), nil, nil, nil, "no replicas"},
		{"times", testConfig(), nil, []int{1, 2}, []float64{1}, "1 compute times for 2 batches"},
		{"ids", testConfig(), []int{4}, []int{1, 2}, []float64{1, 1}, "1 replica ids for 2 batches"},
		{"zero batch", testConfig(), nil, []int{1, 0}, []float64{1, 1}, "replica 1: batch 0 is not positive"},
		{"max batch", Config{Interval: 1, MinBatch: 1, MaxBatch: []int{9}}, nil, []int{1, 2}, []float64{1, 1}, "max_batch has 1 entries for 2 replicas"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, changed, why := mustController(t, tt.cfg).Observe(0, tt.ids, tt.batches, tt.secs)
			if changed || why.Reason != InvalidInput || !slices.Equal(next, tt.batches) {
				t.Fatalf("changed %v reason %q next %v", changed, why.Reason, next)
			}
			if len(why.Notes) != 1 || !strings.Contains(why.Notes[0], tt.want) {
				t.Errorf("notes %q, want %q", why.Notes, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"interval", func(c *Config) { c.Interval = 0 }, "interval 0"},
		{"smoothing 1", func(c *Config) { c.Smoothing = 1 }, "smoothing 1"},
		{"smoothing NaN", func(c *Config) { c.Smoothing = math.NaN() }, "smoothing NaN"},
		{"deadband", func(c *Config) { c.Deadband = -0.1 }, "deadband -0.1"},
		{"min batch", func(c *Config) { c.MinBatch = 0 }, "min_batch 0"},
		{"max under min", func(c *Config) { c.MinBatch, c.MaxBatch = 4, []int{8, 3} }, "max_batch[1] = 3 < min_batch 4"},
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("the default config: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			if _, err := NewController(cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestChangedReplicaForgetsItsTimes: when one replica's batch changes (in
// ASP each applies a new split from its own next step), its EMA starts
// again from the first time at the new batch, while the other keeps its.
func TestChangedReplicaForgetsItsTimes(t *testing.T) {
	ctl := mustController(t, Config{Interval: 10, Smoothing: 0.5, MinBatch: 1})
	ctl.Observe(0, nil, []int{100, 100}, []float64{4, 2})
	ctl.Observe(1, nil, []int{100, 100}, []float64{4, 2})
	_, _, why := ctl.Observe(2, nil, []int{90, 100}, []float64{1, 1})
	if r := why.Replicas[0]; r.Seconds != 1 || r.Samples != 1 {
		t.Errorf("the replica whose batch changed: EMA %g over %d samples, want 1 over 1 (times at the old batch forgotten)", r.Seconds, r.Samples)
	}
	if r := why.Replicas[1]; r.Seconds != 1.5 || r.Samples != 3 {
		t.Errorf("the replica whose batch stayed: EMA %g over %d samples, want 1.5 over 3", r.Seconds, r.Samples)
	}
}

// TestLaggingReportsDoNotAdjustTwice: after an adjustment the replicas go
// on reporting the old split for a while (reports lag, ASP replicas switch
// at their own steps). Those times are of the old split: the controller
// waits for the new one, then a full interval at it, before it adjusts
// again, and never decides on a split in transition.
func TestLaggingReportsDoNotAdjustTwice(t *testing.T) {
	ctl := mustController(t, Config{Interval: 2, Deadband: 0.05, MinBatch: 1})
	step := int64(0)
	observe := func(batches []int, secs []float64) ([]int, bool, Decision) {
		step++
		return ctl.Observe(step, nil, batches, secs)
	}
	observe([]int{100, 100}, []float64{1, 4})
	next, changed, _ := observe([]int{100, 100}, []float64{1, 4})
	if !changed || !slices.Equal(next, []int{160, 40}) {
		t.Fatalf("first adjustment: %v (changed %v), want [160 40]", next, changed)
	}
	for i := range 5 { // the old split, still 1:4 apart
		if _, changed, why := observe([]int{100, 100}, []float64{1, 4}); changed {
			t.Fatalf("lagging report %d adjusted again to %v: %+v", i, why.Replicas, why)
		}
	}
	if _, changed, why := observe([]int{160, 100}, []float64{1.6, 4}); changed || why.Reason != WarmingUp {
		t.Fatalf("a split in transition: changed %v, reason %q", changed, why.Reason)
	}
	if _, changed, why := observe([]int{160, 40}, []float64{1.6, 1.6}); changed || why.Reason != WarmingUp {
		t.Fatalf("first report at the new split: changed %v, reason %q; want to wait the interval", changed, why.Reason)
	}
	if _, changed, why := observe([]int{160, 40}, []float64{1.6, 1.6}); changed || why.Reason != InsideDeadband {
		t.Fatalf("balanced at the new split: changed %v, reason %q", changed, why.Reason)
	}
}
