package place

import (
	"fmt"
	"slices"

	"github.com/heterps/heterps/config"
)

// Device is one device of a machine.
type Device struct {
	Name          string          `toml:"name"`
	Kind          string          `toml:"kind"`           // cpu | gpu
	PeakFLOPS     float64         `toml:"peak_flops"`     // FP32 FLOP/s
	MemBandwidth  float64         `toml:"mem_bandwidth"`  // bytes/s to its own memory
	Memory        config.ByteSize `toml:"memory"`         // bytes a placement may use on it
	LinkBandwidth float64         `toml:"link_bandwidth"` // bytes/s out of it to the other devices
	LinkLatency   float64         `toml:"link_latency"`   // seconds per transfer (default 10 µs)
	LaunchLatency float64         `toml:"launch_latency"` // seconds per op (default: cpu 1 µs, gpu 5 µs)
	// Threads is a cpu device's kernel threads (default 1): a placement
	// executed for real (Execute) runs its ops on a CPU backend of that
	// many threads.
	Threads int `toml:"threads"`
	// Local marks this machine's own CPU: with measuring on, its op times
	// are measured with the real kernels instead of the roofline.
	Local bool `toml:"local"`
}

// Devices is a devices file: the devices of one machine.
type Devices struct {
	Version int      `toml:"version"`
	Name    string   `toml:"name"`
	Devices []Device `toml:"device"`
}

// MaxDevices bounds a devices file.
const MaxDevices = 64

// ExampleDevices is the folder of config/examples holding devices files.
const ExampleDevices = "devices"

// LoadDevices reads a devices file by path, or a built-in one by name
// (config/examples/devices/NAME.toml).
func LoadDevices(nameOrPath string) (*Devices, error) {
	label, src, err := readDevices(nameOrPath)
	if err != nil {
		return nil, err
	}
	return ParseDevices(label, src)
}

func readDevices(nameOrPath string) (string, []byte, error) {
	if config.IsExampleName(nameOrPath) {
		if label, src, err := config.ReadExample(ExampleDevices, nameOrPath); err == nil {
			return label, src, nil
		}
	}
	src, err := config.ReadFile(nameOrPath)
	if err != nil {
		return "", nil, fmt.Errorf("devices %q: %w", nameOrPath, err)
	}
	return nameOrPath, src, nil
}

// ParseDevices decodes and validates a devices file's contents.
func ParseDevices(name string, src []byte) (*Devices, error) {
	var d Devices
	if err := config.Decode(name, src, &d); err != nil {
		return nil, err
	}
	if d.Version == 0 {
		d.Version = 1
	}
	if err := d.validate(config.NewLocator(name, src)); err != nil {
		return nil, err
	}
	return &d, nil
}

func (d *Devices) validate(loc *config.Locator) error {
	if d.Version != 1 {
		return loc.Errorf("version", "unsupported version %d (this heterps reads version 1)", d.Version)
	}
	if len(d.Devices) == 0 || len(d.Devices) > MaxDevices {
		return loc.Errorf("device", "want 1..%d [[device]] entries, got %d", MaxDevices, len(d.Devices))
	}
	seen := map[string]bool{}
	for i := range d.Devices {
		dev := &d.Devices[i]
		at := fmt.Sprintf("device[%d]", i)
		if dev.Name == "" || seen[dev.Name] {
			return loc.Errorf(at+".name", "missing or repeated name %q", dev.Name)
		}
		seen[dev.Name] = true
		if !slices.Contains([]string{"cpu", "gpu"}, dev.Kind) {
			return loc.Errorf(at+".kind", "unknown kind %q (want cpu or gpu)", dev.Kind)
		}
		for _, f := range []struct {
			field string
			v     float64
		}{{"peak_flops", dev.PeakFLOPS}, {"mem_bandwidth", dev.MemBandwidth}, {"link_bandwidth", dev.LinkBandwidth}, {"memory", float64(dev.Memory)}} {
			if !(f.v > 0) || f.v > 1e30 {
				return loc.Errorf(at+"."+f.field, "must be > 0 (and finite), got %g", f.v)
			}
		}
		if dev.Threads < 0 || dev.Threads > MaxInventoryCores {
			return loc.Errorf(at+".threads", "must be in 0..%d, got %d", MaxInventoryCores, dev.Threads)
		}
		if dev.LinkLatency < 0 || dev.LaunchLatency < 0 || dev.LinkLatency > 1 || dev.LaunchLatency > 1 {
			return loc.Errorf(at, "link_latency and launch_latency must be in [0, 1] s, got %g and %g", dev.LinkLatency, dev.LaunchLatency)
		}
		dev.defaults()
	}
	return nil
}

func (dev *Device) defaults() {
	if dev.Threads == 0 && dev.Kind == "cpu" {
		dev.Threads = 1
	}
	if dev.LinkLatency == 0 {
		dev.LinkLatency = 10e-6
	}
	if dev.LaunchLatency == 0 {
		dev.LaunchLatency = 1e-6
		if dev.Kind == "gpu" {
			dev.LaunchLatency = 5e-6
		}
	}
}

// Fastest is the index of the device with the highest peak FLOP/s (the
// first among equals).
func Fastest(devs []Device) int {
	best := 0
	for i, d := range devs {
		if d.PeakFLOPS > devs[best].PeakFLOPS {
			best = i
		}
	}
	return best
}

// FirstCPU is the index of the first cpu device, or -1.
func FirstCPU(devs []Device) int {
	return slices.IndexFunc(devs, func(d Device) bool { return d.Kind == "cpu" })
}
