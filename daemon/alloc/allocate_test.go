package alloc

import (
	"fmt"
	"math"
	"testing"
)

// testJob is a job at iteration k on a known exponential curve, with
// iteration time 1/u + 0.05 s.
func testJob(id string, l0, rate, floor, k float64) Job {
	c := Curve{Family: Exponential, P: [4]float64{l0 - floor, rate, floor}, L0: l0}
	return Job{ID: id, History: []Point{{0, l0}, {k, c.Predict(k)}}, Curve: &c, Step: StepModel{C: 1, O: 0.05}}
}

func mixedJobs() []Job {
	return []Job{
		testJob("young", 3, 2e-3, 0.5, 10),
		testJob("old", 2, 5e-3, 0.2, 900),
		testJob("mid", 1, 1e-3, 0.1, 300),
		testJob("steep", 5, 2e-2, 1, 20),
	}
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

func TestGrantsAreExhaustiveAndEveryJobGetsOne(t *testing.T) {
	for _, p := range Policies() {
		for _, units := range []int{4, 5, 17, 64} {
			jobs := mixedJobs()
			jobs[1].MaxUnits = 3
			g, err := Allocate(p, jobs, units, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if sum(g) != units {
				t.Errorf("%s, %d units: granted %v (sum %d)", p, units, g, sum(g))
			}
			for i, u := range g {
				if u < 1 || (jobs[i].MaxUnits > 0 && u > jobs[i].MaxUnits) {
					t.Errorf("%s, %d units: job %s got %d", p, units, jobs[i].ID, u)
				}
			}
		}
	}
}

func TestCapsLeaveUnitsOnlyWhenNoJobCanUseThem(t *testing.T) {
	jobs := mixedJobs()
	for i := range jobs {
		jobs[i].MaxUnits = 2
	}
	g, err := Allocate(Quality, jobs, 20, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g) != "[2 2 2 2]" {
		t.Errorf("granted %v, want every job at its cap of 2", g)
	}
}

func TestFewerUnitsThanJobsGoToTheFirstJobs(t *testing.T) {
	g, err := Allocate(Quality, mixedJobs(), 2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g) != "[1 1 0 0]" {
		t.Errorf("granted %v, want [1 1 0 0]", g)
	}
}

func TestFairSplitsEvenly(t *testing.T) {
	for _, units := range []int{4, 7, 10, 33} {
		g, err := Allocate(Fair, mixedJobs(), units, Options{})
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := g[0], g[0]
		for _, u := range g {
			lo, hi = min(lo, u), max(hi, u)
		}
		if hi-lo > 1 || sum(g) != units {
			t.Errorf("%d units: fair gave %v", units, g)
		}
	}
}

// objective is what a policy's greedy maximises, for the brute force.
func objective(p Policy, st []jobState, g []int) float64 {
	var s float64
	m := math.Inf(1)
	for i, u := range g {
		q := st[i].quality(u)
		switch p {
		case Priority:
			s += st[i].priority * q
		case QualityPerCost:
			s += q / st[i].price
		default:
			s += q
		}
		m = math.Min(m, q)
	}
	if p == MaxMin {
		return m
	}
	return s
}

// bruteForce returns the best objective over every split of units with at
// least one unit per job.
func bruteForce(p Policy, st []jobState, units int) float64 {
	best := math.Inf(-1)
	g := make([]int, len(st))
	var rec func(i, left int)
	rec = func(i, left int) {
		if i == len(st)-1 {
			g[i] = left
			best = math.Max(best, objective(p, st, g))
			return
		}
		for u := 1; u <= left-(len(st)-1-i); u++ {
			g[i] = u
			rec(i+1, left-u)
		}
	}
	rec(0, units)
	return best
}

func states(t *testing.T, jobs []Job) []jobState {
	st := make([]jobState, len(jobs))
	for i := range jobs {
		s, err := newJobState(&jobs[i], 5, FitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st[i] = s
	}
	return st
}

func TestGreedyEqualsBruteForce(t *testing.T) {
	for _, p := range []Policy{Quality, Priority, QualityPerCost, MaxMin} {
		for _, units := range []int{4, 6, 9, 14} {
			jobs := mixedJobs()
			jobs[0].Priority, jobs[2].Priority = 4, 2
			jobs[1].Price, jobs[3].Price = 3, 0.5
			g, err := Allocate(p, jobs, units, Options{})
			if err != nil {
				t.Fatal(err)
			}
			st := states(t, jobs)
			got, want := objective(p, st, g), bruteForce(p, st, units)
			if got < want-1e-12 {
				t.Errorf("%s, %d units: greedy %v scores %.6f, brute force %.6f", p, units, g, got, want)
			}
		}
	}
}

// The first unit is worth a lot to "burst" and little after (its epoch would
// end its remaining work); without recomputing its key after a grant it would
// take every unit.
func TestKeysAreRecomputedAfterEachGrant(t *testing.T) {
	burst := testJob("burst", 3, 5e-2, 0.5, 0)
	burst.Remaining = 8
	steady := testJob("steady", 3, 1e-3, 0.5, 0)
	g, err := Allocate(Quality, []Job{burst, steady}, 10, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g[0] >= 5 || g[1] <= 5 {
		t.Errorf("granted %v, want most units to steady once burst has what it can use", g)
	}
}

func TestPrioritiesOrderGrants(t *testing.T) {
	jobs := []Job{testJob("a", 2, 1e-3, 0.5, 100), testJob("b", 2, 1e-3, 0.5, 100), testJob("c", 2, 1e-3, 0.5, 100)}
	jobs[0].Priority, jobs[1].Priority, jobs[2].Priority = 1, 8, 3
	g, err := Allocate(Priority, jobs, 30, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !(g[1] > g[2] && g[2] > g[0]) {
		t.Errorf("priorities 1, 8, 3 got %v, want b > c > a", g)
	}
	even, err := Allocate(Quality, jobs, 30, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(even) != "[10 10 10]" {
		t.Errorf("quality ignores priorities: got %v, want [10 10 10]", even)
	}
}

func TestArrivalsAndDeparturesBetweenEpochs(t *testing.T) {
	jobs := mixedJobs()
	g1, err := Allocate(Quality, jobs, 16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		jobs[i].UnitsNow = g1[i]
	}
	// "old" leaves: the others share its units, none losing any.
	left := []Job{jobs[0], jobs[2], jobs[3]}
	g2, err := Allocate(Quality, left, 16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum(g2) != 16 || g2[0] < g1[0] || g2[1] < g1[2] || g2[2] < g1[3] {
		t.Errorf("after a departure: %v from %v, want all 16 units and nobody losing", g2, g1)
	}
	// "new" arrives with only its first loss and gets its unit and more.
	arrived := append(left, Job{ID: "new", History: []Point{{0, 4}}, Step: StepModel{C: 1, O: 0.05}})
	g3, err := Allocate(Quality, arrived, 16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum(g3) != 16 || g3[3] < 2 {
		t.Errorf("after an arrival: %v, want 16 units with more than one for the new job", g3)
	}
}

func TestDecisionsAreDeterministicOnTies(t *testing.T) {
	jobs := []Job{testJob("b", 2, 1e-3, 0.5, 100), testJob("a", 2, 1e-3, 0.5, 100)}
	g, err := Allocate(Quality, jobs, 3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g) != "[1 2]" {
		t.Errorf("tie went to %v, want the smaller ID a", g)
	}
	jobs[0].UnitsNow = 2
	if g, _ = Allocate(Quality, jobs, 3, Options{}); fmt.Sprint(g) != "[2 1]" {
		t.Errorf("tie went to %v, want b, which holds more units now", g)
	}
}

func TestAllocateFitsHistoriesItself(t *testing.T) {
	truth := Curve{Family: Exponential, P: [4]float64{2, 4e-3, 0.3}}
	j := Job{ID: "h", History: synth(truth, 40, 0.002, 3), Step: StepModel{C: 1}}
	fitted := j
	c, err := FitCurve(j.History, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fitted.Curve = &c
	other := testJob("o", 3, 1e-3, 0.5, 50)
	a, err := Allocate(Quality, []Job{j, other}, 12, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Allocate(Quality, []Job{fitted, other}, 12, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("fitting inside Allocate gave %v, a given fit %v", a, b)
	}
}

func TestAllocateRejectsBadInput(t *testing.T) {
	if _, err := Allocate("best", mixedJobs(), 4, Options{}); err == nil {
		t.Error("unknown policy accepted")
	}
	if _, err := Allocate(Quality, mixedJobs(), -1, Options{}); err == nil {
		t.Error("negative units accepted")
	}
	if _, err := Allocate(Quality, []Job{{ID: "x", Step: StepModel{C: 1}}}, 4, Options{}); err == nil {
		t.Error("job without history accepted")
	}
	if _, err := Allocate(Quality, []Job{{ID: "x", History: []Point{{0, 1}}}}, 4, Options{}); err == nil {
		t.Error("job without step model accepted")
	}
}

func TestSpeedScalesUnitsAndPriceDividesGains(t *testing.T) {
	fast, slow := testJob("fast", 3, 1e-3, 0.5, 100), testJob("slow", 3, 1e-3, 0.5, 100)
	fast.Speed = 2
	st := states(t, []Job{fast, slow})
	for u := 1; u <= 4; u++ {
		if a, b := st[0].quality(u), st[1].quality(2*u); math.Abs(a-b) > 1e-12 {
			t.Errorf("a unit at speed 2 should count as two: q(%d) = %v, slow q(%d) = %v", u, a, 2*u, b)
		}
	}
	cheap, dear := testJob("cheap", 3, 1e-3, 0.5, 100), testJob("dear", 3, 1e-3, 0.5, 100)
	dear.Price = 4
	g, err := Allocate(QualityPerCost, []Job{cheap, dear}, 20, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g[0] <= g[1] {
		t.Errorf("quality-per-cost gave cheap %d, dear %d; want cheap more", g[0], g[1])
	}
}
