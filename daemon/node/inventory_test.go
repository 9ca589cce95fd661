package node

import (
	"runtime"
	"testing"
)

func TestInventoryMatchesTheMachine(t *testing.T) {
	inv, err := TakeInventory()
	if err != nil {
		t.Fatal(err)
	}
	if inv.Cores != runtime.NumCPU() {
		t.Errorf("cores %d, runtime sees %d", inv.Cores, runtime.NumCPU())
	}
	if inv.MemoryBytes < 64<<20 {
		t.Errorf("memory %d bytes is implausibly small", inv.MemoryBytes)
	}
	if len(inv.GPUs) != 0 {
		t.Errorf("the default build lists GPUs: %+v", inv.GPUs)
	}
}

func TestDriverVersion(t *testing.T) {
	for v, want := range map[int]string{13000: "13.0", 12080: "12.8", 11040: "11.4"} {
		if got := driverVersion(v); got != want {
			t.Errorf("driverVersion(%d) = %q, want %q", v, got, want)
		}
	}
}
