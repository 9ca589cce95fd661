package place

import (
	"strings"
	"testing"
)

// TestDevicesFromACPUOnlyInventory: a CPU-only node's cores become two
// thread groups sharing its memory, FLOP/s in proportion to their threads.
func TestDevicesFromACPUOnlyInventory(t *testing.T) {
	d, err := DevicesFromInventory(Inventory{Name: "n1", Cores: 5, MemoryBytes: 10 << 30}, InventoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Devices) != 2 {
		t.Fatalf("devices %+v, want two thread groups", d.Devices)
	}
	a, b := d.Devices[0], d.Devices[1]
	if a.Threads != 3 || b.Threads != 2 || a.Kind != "cpu" || a.Memory != 5<<30 || a.PeakFLOPS != 3*defaultCoreFLOPS || b.PeakFLOPS != 2*defaultCoreFLOPS {
		t.Errorf("thread groups %+v and %+v", a, b)
	}
	if a.LaunchLatency == 0 || a.LinkLatency == 0 {
		t.Errorf("no default latencies: %+v", a)
	}
}

// TestDevicesFromAGPUInventory: beside GPUs the CPU is one device; each
// GPU is a device with its memory and FLOP/s from its multiprocessors.
func TestDevicesFromAGPUInventory(t *testing.T) {
	inv := Inventory{Name: "g", Cores: 16, MemoryBytes: 64 << 30, GPUs: []InventoryGPU{
		{Name: "H200", MemoryBytes: 140 << 30, Multiprocessors: 132}, {Name: "unknown", MemoryBytes: 16 << 30}}}
	d, err := DevicesFromInventory(inv, InventoryOptions{CoreFLOPS: 1e10})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Devices) != 3 {
		t.Fatalf("devices %+v", d.Devices)
	}
	cpu, h200, other := d.Devices[0], d.Devices[1], d.Devices[2]
	if cpu.Threads != 16 || cpu.PeakFLOPS != 16e10 || cpu.Memory != 64<<30 {
		t.Errorf("cpu %+v", cpu)
	}
	if h200.Kind != "gpu" || h200.Memory != 140<<30 || h200.PeakFLOPS != 132*smFLOPS || h200.Name != "gpu0" {
		t.Errorf("gpu0 %+v", h200)
	}
	if other.PeakFLOPS != defaultGPUFLOPS {
		t.Errorf("a GPU without multiprocessors: %+v", other)
	}
	if Fastest(d.Devices) != 1 {
		t.Errorf("fastest device %d, want the H200", Fastest(d.Devices))
	}
}

func TestBadInventoriesAreRefused(t *testing.T) {
	for _, c := range []struct {
		inv  Inventory
		o    InventoryOptions
		want string
	}{
		{Inventory{Cores: 0, MemoryBytes: 1}, InventoryOptions{}, "cores: want 1.."},
		{Inventory{Cores: 2}, InventoryOptions{}, "memory_bytes"},
		{Inventory{Cores: 2, MemoryBytes: 1}, InventoryOptions{CPUDevices: 3}, "3 CPU devices asked for 2 cores"},
		{Inventory{Cores: 2, MemoryBytes: 1, GPUs: []InventoryGPU{{Name: "x"}}}, InventoryOptions{}, "gpus[0] (x)"},
		{Inventory{Cores: 2, MemoryBytes: 1}, InventoryOptions{CoreFLOPS: -1}, "core FLOP/s"},
	} {
		if _, err := DevicesFromInventory(c.inv, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.inv, err, c.want)
		}
	}
}
