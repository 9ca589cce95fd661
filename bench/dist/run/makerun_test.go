package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/heterps/heterps/bench/internal/heterpsbin"
	"github.com/heterps/heterps/config"
)

// The make-run block trains make run's own job file, only its steps
// changed.
func TestMakeRunJobFileChangesOnlyTheSteps(t *testing.T) {
	src := filepath.Join("..", "..", "..", makeRunJob)
	path, err := makeRunJobFile(src, t.TempDir(), 1234)
	if err != nil {
		t.Fatal(err)
	}
	want, err := config.LoadJob(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.LoadJob(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Steps != 1234 {
		t.Errorf("steps %d, want 1234", got.Steps)
	}
	got.Steps = want.Steps
	if got.Name != want.Name || got.Batch != want.Batch || got.Model != want.Model || got.Data != want.Data || got.Mode != want.Mode {
		t.Errorf("job %+v, want %+v but for its steps", got, want)
	}
}

func TestMakeRunJobFileRefusesAnotherBatch(t *testing.T) {
	src := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(src, []byte("batch = 256\nsteps = 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := makeRunJobFile(src, t.TempDir(), 100); err == nil || !strings.Contains(err.Error(), "want batch = 512") {
		t.Errorf("a job of batch 256: %v, want refused", err)
	}
}

// The make-run block's two sides take turns going first (A B, B A, ...),
// each keeping its fastest run and every figure in the order run, and the
// block stops at the first failure, naming the side.
func TestAlternateSidesTakesTurnsGoingFirst(t *testing.T) {
	var order []string
	rates := map[string][]float64{"train": {70, 80, 75}, "run": {60, 58, 66}}
	sides := func(fail string) []side {
		var out []side
		for _, name := range []string{"train", "run"} {
			ran := 0
			out = append(out, side{name, func() (*heterpsbin.Result, error) {
				if name == fail {
					return nil, errors.New("daemon died")
				}
				order = append(order, name)
				ran++
				return &heterpsbin.Result{SamplesPerS: rates[name][ran-1]}, nil
			}})
		}
		return out
	}
	best, all, err := alternateSides(3, sides(""))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"train", "run", "run", "train", "train", "run"}; !slices.Equal(order, want) {
		t.Fatalf("ran %v, want %v", order, want)
	}
	if best[0].SamplesPerS != 80 || best[1].SamplesPerS != 66 {
		t.Fatalf("best %v and %v, want 80 and 66", best[0].SamplesPerS, best[1].SamplesPerS)
	}
	if !slices.Equal(all[0], rates["train"]) || !slices.Equal(all[1], rates["run"]) {
		t.Fatalf("runs %v, want %v and %v", all, rates["train"], rates["run"])
	}
	if _, _, err := alternateSides(2, sides("run")); err == nil || !strings.Contains(err.Error(), "run: daemon died") {
		t.Fatalf("got %v", err)
	}
}

// The rounds' ratio is the median of each round's ratio, not the ratio of
// the bests: a lucky run on one side does not move it.
func TestRoundsRatioIsTheMedianOfEachRoundsRatio(t *testing.T) {
	for _, c := range []struct {
		num, den []float64
		want     float64
	}{
		{[]float64{60, 58, 66}, []float64{70, 80, 75}, 60.0 / 70},                  // 0.857 0.725 0.88
		{[]float64{50, 90}, []float64{100, 100}, 0.7},                              // even: the mean of the middle two
		{[]float64{80, 40, 45, 50}, []float64{100, 50, 100, 100}, (0.5 + 0.8) / 2}, // 0.8 0.8 0.45 0.5
		{[]float64{10, 20, 30}, []float64{10, 20}, 1},                              // only whole rounds count
		{nil, []float64{1}, 0},
	} {
		if got := roundsRatio(c.num, c.den); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("roundsRatio(%v, %v) = %v, want %v", c.num, c.den, got, c.want)
		}
	}
}
