package place

import (
	"fmt"

	"github.com/heterps/heterps/config"
)

// Inventory is what a node reports of itself when it registers (the
// node daemon's api.RegisterRequest, listed by the coordinator's GET
// /v1/nodes): logical cores, memory and GPUs. Names of this package's own,
// since place imports only native and config.
type Inventory struct {
	Name        string
	Cores       int
	MemoryBytes int64
	GPUs        []InventoryGPU
}

// InventoryGPU is one GPU of an Inventory.
type InventoryGPU struct {
	Name            string
	MemoryBytes     int64
	Multiprocessors int
}

// InventoryOptions shape the devices built from an inventory; zero fields
// take the defaults.
type InventoryOptions struct {
	// CPUDevices is how many thread groups the cores are split into, each
	// a device (default: 1 beside GPUs, else 2 when there are 2 cores or
	// more, so that a CPU-only node has devices to place on).
	CPUDevices int
	// CoreFLOPS is one core's FP32 FLOP/s (default 8.3e10, an AVX-512 core
	// at 2.6 GHz at half its peak, as the built-in "local" devices).
	CoreFLOPS float64
}

// Figures an inventory does not carry, from the devices files' reference
// machines: per core and per GPU multiprocessor.
const (
	defaultCoreFLOPS   = 8.3e10
	coreMemBandwidth   = 1.0e10 // bytes/s per core, up to cpuMemBandwidthMax
	cpuMemBandwidthMax = 1.2e11
	cpuLinkBandwidth   = 1.0e10 // memory copies between thread groups and to PCIe
	smFLOPS            = 1.9e11 // 64 FP32 lanes x 2 x ~1.5 GHz
	smMemBandwidth     = 1.1e10 // a V100's 900 GB/s over its 80 SMs
	gpuLinkBandwidth   = 1.2e10 // PCIe 3.0 x16
	// Without a multiprocessor count, a GPU is taken for a V100.
	defaultGPUFLOPS, defaultGPUMemBandwidth = 1.4e13, 9.0e11
	// MaxInventoryCores bounds an inventory's cores.
	MaxInventoryCores = 1 << 14
)

// DevicesFromInventory builds a node's device set from its inventory: its
// cores as o.CPUDevices thread groups sharing its memory (devices
// "cpu0".."cpuN", Threads set), and one device per GPU ("gpu0"..) with
// FLOP/s and bandwidth scaled by its multiprocessors. The figures an
// inventory lacks (a core's FLOP/s, bandwidths) are the reference
// machines'; a devices file says them exactly.
func DevicesFromInventory(inv Inventory, o InventoryOptions) (*Devices, error) {
	at := fmt.Sprintf("inventory of node %q", inv.Name)
	if inv.Cores < 1 || inv.Cores > MaxInventoryCores {
		return nil, fmt.Errorf("place: %s: cores: want 1..%d, got %d", at, MaxInventoryCores, inv.Cores)
	}
	if inv.MemoryBytes <= 0 {
		return nil, fmt.Errorf("place: %s: memory_bytes: want > 0, got %d", at, inv.MemoryBytes)
	}
	groups := o.CPUDevices
	if groups == 0 {
		groups = 1
		if len(inv.GPUs) == 0 {
			groups = min(inv.Cores, 2)
		}
	}
	if groups < 1 || groups > inv.Cores {
		return nil, fmt.Errorf("place: %s: %d CPU devices asked for %d cores: want 1..%d", at, groups, inv.Cores, inv.Cores)
	}
	if groups+len(inv.GPUs) > MaxDevices {
		return nil, fmt.Errorf("place: %s: %d CPU devices and %d GPUs, more than %d devices", at, groups, len(inv.GPUs), MaxDevices)
	}
	coreFLOPS := o.CoreFLOPS
	if coreFLOPS == 0 {
		coreFLOPS = defaultCoreFLOPS
	}
	if !(coreFLOPS > 0) || coreFLOPS > 1e15 {
		return nil, fmt.Errorf("place: %s: core FLOP/s must be in (0, 1e15], got %g", at, coreFLOPS)
	}
	d := &Devices{Version: 1, Name: inv.Name}
	for i := range groups {
		threads := inv.Cores / groups
		if i < inv.Cores%groups {
			threads++
		}
		d.Devices = append(d.Devices, Device{Name: fmt.Sprintf("cpu%d", i), Kind: "cpu", Threads: threads,
			PeakFLOPS: float64(threads) * coreFLOPS, MemBandwidth: min(float64(threads)*coreMemBandwidth, cpuMemBandwidthMax),
			Memory: config.ByteSize(inv.MemoryBytes / int64(groups)), LinkBandwidth: cpuLinkBandwidth})
	}
	for i, g := range inv.GPUs {
		if g.MemoryBytes <= 0 || g.Multiprocessors < 0 {
			return nil, fmt.Errorf("place: %s: gpus[%d] (%s): memory_bytes must be > 0 and multiprocessors >= 0, got %d and %d",
				at, i, g.Name, g.MemoryBytes, g.Multiprocessors)
		}
		flops, bw := defaultGPUFLOPS, defaultGPUMemBandwidth
		if g.Multiprocessors > 0 {
			flops, bw = float64(g.Multiprocessors)*smFLOPS, float64(g.Multiprocessors)*smMemBandwidth
		}
		d.Devices = append(d.Devices, Device{Name: fmt.Sprintf("gpu%d", i), Kind: "gpu", PeakFLOPS: flops, MemBandwidth: bw,
			Memory: config.ByteSize(g.MemoryBytes), LinkBandwidth: gpuLinkBandwidth})
	}
	for i := range d.Devices {
		d.Devices[i].defaults()
	}
	return d, nil
}
