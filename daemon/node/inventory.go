package node

import (
	"fmt"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/mem"

	"github.com/heterps/heterps/daemon/api"
)

// Inventory is what a node offers, as it registers it.
type Inventory struct {
	Cores       int
	MemoryBytes int64
	GPUs        []api.GPU
}

// gpuInventory lists the machine's GPUs; the cuda build sets it.
var gpuInventory = func() ([]api.GPU, error) { return nil, nil }

// TakeInventory reads the machine's logical cores, total memory and GPUs.
func TakeInventory() (Inventory, error) {
	cores, err := cpu.Counts(true)
	if err != nil {
		return Inventory{}, fmt.Errorf("inventory: cores: %w", err)
	}
	vm, err := mem.VirtualMemory()
	if err != nil {
		return Inventory{}, fmt.Errorf("inventory: memory: %w", err)
	}
	gpus, err := gpuInventory()
	if err != nil {
		return Inventory{}, fmt.Errorf("inventory: gpus: %w", err)
	}
	return Inventory{Cores: cores, MemoryBytes: int64(vm.Total), GPUs: gpus}, nil
}

// driverVersion formats the driver API's CUDA version (13000 for 13.0).
func driverVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
