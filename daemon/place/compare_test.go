package place

import (
	"math"
	"strings"
	"testing"
)

// TestCompareSkipsExactAndMeasuresFromTheBest: exact on a graph too large is
// a skipped row, not an error; distances are from the cheapest row.
func TestCompareSkipsExactAndMeasuresFromTheBest(t *testing.T) {
	d := testDevice("d", 1e12, 1<<30, 1e10)
	s := newSim(t, twoChains(), d, d)
	rows, err := Compare(t.Context(), s, []string{"single", "mincut", "exact"}, Options{ExactBound: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[2].Outcome != nil || !strings.Contains(rows[2].Skipped, "more than the bound 10") {
		t.Fatalf("%+v", rows)
	}
	best := math.Min(rows[0].Outcome.Result.Cost, rows[1].Outcome.Result.Cost)
	for _, r := range rows[:2] {
		if want := r.Outcome.Result.Cost/best - 1; math.Abs(r.FromBest-want) > 1e-12 {
			t.Errorf("%s: %g from the best, want %g", r.Method, r.FromBest, want)
		}
	}
	if rows[1].FromBest != 0 || rows[0].FromBest < 0.5 {
		t.Errorf("single %+.2f, mincut %+.2f from the best", rows[0].FromBest, rows[1].FromBest)
	}
}

func TestParseMethods(t *testing.T) {
	if all, err := ParseMethods("all"); err != nil || len(all) != 5 {
		t.Errorf("all: %v %v", all, err)
	}
	if got, err := ParseMethods("rl, exact"); err != nil || len(got) != 2 || got[0] != "rl" || got[1] != "exact" {
		t.Errorf("%v %v", got, err)
	}
	if _, err := ParseMethods("rl,scotch"); err == nil {
		t.Error("an unknown method was accepted")
	}
}

func TestGroupDevicesMarksSplitGroups(t *testing.T) {
	g := &Graph{Groups: []string{"a", "b"}, Ops: []Op{{Group: 0}, {Group: 0}, {Group: 1}, {Group: 1}}}
	got := GroupDevices(g, []int{2, 2, 0, 1})
	if got[0] != 2 || got[1] != -1 {
		t.Errorf("%v", got)
	}
}

func TestLoadGraphKnowsTheSyntheticGraphs(t *testing.T) {
	for _, name := range []string{SyntheticNMT, SyntheticInception, "ctrdnn"} {
		g, err := LoadGraph(name, 64)
		if err != nil || len(g.Ops) == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := LoadGraph("no-such-model", 64); err == nil {
		t.Error("an unknown graph was loaded")
	}
}

// TestExactDoesNotMergeDevicesWithOtherTimes: devices alike on paper but
// with other (measured) op times are not interchangeable.
func TestExactDoesNotMergeDevicesWithOtherTimes(t *testing.T) {
	d := testDevice("d", 1e12, 1<<30, 1e10)
	s := newSim(t, chain([]float64{1e9, 1e9}, 1), d, d)
	if c := deviceClasses(s); c[1] != 0 {
		t.Fatalf("identical devices in classes %v", c)
	}
	s.SetTime(0, 1, 1e-6)
	if c := deviceClasses(s); c[1] != 1 {
		t.Fatalf("devices with other op times in classes %v", c)
	}
	out, err := Place(t.Context(), "exact", s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Placement[0] != 1 {
		t.Errorf("exact put op 0 on device %d, not where it is fast", out.Placement[0])
	}
}
