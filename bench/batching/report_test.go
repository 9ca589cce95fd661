package main

import "testing"

func TestASplitThatNeverMovedIsNoEquilibrium(t *testing.T) {
	if equilibrated(metrics{adjustments: 0, settleStep: 0, settleAdj: 0}) {
		t.Error("no adjustment counts as an equilibrium")
	}
	if !equilibrated(metrics{adjustments: 4, settleStep: 30, settleAdj: 2}) {
		t.Error("settled after 2 of 4 adjustments is not an equilibrium")
	}
	if equilibrated(metrics{adjustments: 5, settleStep: 90, settleAdj: 4}) {
		t.Error("settled after 4 adjustments meets the target of 3")
	}
}
