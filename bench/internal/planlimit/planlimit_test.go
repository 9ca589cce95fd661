package planlimit

import (
	"errors"
	"math"
	"testing"
)

// unitsAbove is a plan whose units grow by one every decade of floor
// above 10 samples/s, infeasible from 1e7.
func unitsAbove(floor float64) (int, error) {
	if floor >= 1e7 {
		return math.MaxInt, nil
	}
	return max(1, int(math.Log10(floor))), nil
}

func TestBisectFindsAFloorOfExactlyNUnits(t *testing.T) {
	for n := 1; n <= 6; n++ {
		floor, err := Bisect(n, unitsAbove)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if u, _ := unitsAbove(floor); u != n {
			t.Fatalf("n=%d: floor %g plans %d units", n, floor, u)
		}
	}
}

func TestBisectSaysWhenNoFloorFits(t *testing.T) {
	if _, err := Bisect(9, unitsAbove); !errors.Is(err, ErrNoFloor) {
		t.Fatalf("got %v, want ErrNoFloor", err)
	}
	boom := errors.New("planner failed")
	if _, err := Bisect(2, func(float64) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the planner's error", err)
	}
}
