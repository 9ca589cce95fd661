//go:build cuda

package cudadrv

/*
#include "shim.h"
*/
import "C"

import "fmt"

// Device is a GPU, by its driver ordinal.
type Device int

// Attribute is a CUdevice_attribute.
type Attribute int

// Device attributes that heterps reads.
const (
	MaxThreadsPerBlock     Attribute = C.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	MultiprocessorCount    Attribute = C.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	ComputeCapabilityMajor Attribute = C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	ComputeCapabilityMinor Attribute = C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	L2CacheSize            Attribute = C.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
	GlobalMemoryBusWidth   Attribute = C.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
	MemoryPoolsSupported   Attribute = C.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
)

// GetDevice returns the device with ordinal i.
func GetDevice(i int) (Device, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var d C.CUdevice
	if err := result(C.hps_cuDeviceGet(&d, C.int(i))); err != nil {
		return 0, fmt.Errorf("cudadrv: device %d: %w", i, err)
	}
	return Device(d), nil
}

// Name returns the marketing name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	var buf [256]C.char
	if err := result(C.hps_cuDeviceGetName(&buf[0], C.int(len(buf)), C.CUdevice(d))); err != nil {
		return "", fmt.Errorf("cudadrv: device %d: name: %w", int(d), err)
	}
	return C.GoString(&buf[0]), nil
}

// TotalMem returns the device memory in bytes.
func (d Device) TotalMem() (int64, error) {
	var n C.size_t
	if err := result(C.hps_cuDeviceTotalMem(&n, C.CUdevice(d))); err != nil {
		return 0, fmt.Errorf("cudadrv: device %d: memory: %w", int(d), err)
	}
	return int64(n), nil
}

// UUID returns the device's UUID as nvidia-smi prints it,
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func (d Device) UUID() (string, error) {
	var u C.CUuuid
	if err := result(C.hps_cuDeviceGetUuid(&u, C.CUdevice(d))); err != nil {
		return "", fmt.Errorf("cudadrv: device %d: uuid: %w", int(d), err)
	}
	var b [16]byte
	for i := range b {
		b[i] = byte(u.bytes[i])
	}
	return FormatUUID(b), nil
}

// Attribute reads one device attribute.
func (d Device) Attribute(a Attribute) (int, error) {
	var v C.int
	if err := result(C.hps_cuDeviceGetAttribute(&v, C.CUdevice_attribute(a), C.CUdevice(d))); err != nil {
		return 0, fmt.Errorf("cudadrv: device %d: attribute %d: %w", int(d), int(a), err)
	}
	return int(v), nil
}

// Info describes a device for inventories and logs.
type Info struct {
	Ordinal         int
	Name            string
	TotalMem        int64 // bytes
	Multiprocessors int
	UUID            string // FormatUUID's form
	CCMajor         int    // compute capability
	CCMinor         int
}

func (i Info) String() string {
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, %.1f GiB)", i.Name, i.CCMajor, i.CCMinor,
		i.Multiprocessors, float64(i.TotalMem)/(1<<30))
}

// Devices lists every GPU the driver sees. On a machine without a driver or
// a GPU it returns an error wrapping ErrNoDriver or ErrNoDevice.
func Devices() ([]Info, error) {
	n, err := NumDevices()
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, n)
	for i := range n {
		info, err := describe(i)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

func describe(i int) (Info, error) {
	d, err := GetDevice(i)
	if err != nil {
		return Info{}, err
	}
	info := Info{Ordinal: i}
	if info.Name, err = d.Name(); err != nil {
		return Info{}, err
	}
	if info.TotalMem, err = d.TotalMem(); err != nil {
		return Info{}, err
	}
	if info.UUID, err = d.UUID(); err != nil {
		return Info{}, err
	}
	for _, a := range []struct {
		attr Attribute
		dst  *int
	}{
		{MultiprocessorCount, &info.Multiprocessors},
		{ComputeCapabilityMajor, &info.CCMajor},
		{ComputeCapabilityMinor, &info.CCMinor},
	} {
		if *a.dst, err = d.Attribute(a.attr); err != nil {
			return Info{}, err
		}
	}
	return info, nil
}
