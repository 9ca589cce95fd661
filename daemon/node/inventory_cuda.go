//go:build cuda

package node

import (
	"errors"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/native"
	"github.com/heterps/heterps/native/cudadrv"
)

// With the cuda build, the inventory lists the GPUs the driver sees (name,
// memory, multiprocessors, UUID and the driver's CUDA version); a
// machine without a GPU or driver simply has none.
func init() {
	gpuInventory = func() ([]api.GPU, error) {
		devs, err := native.CUDADevices()
		if errors.Is(err, native.ErrNoGPU) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		v, err := cudadrv.Version()
		if err != nil {
			return nil, err
		}
		out := make([]api.GPU, len(devs))
		for i, d := range devs {
			out[i] = api.GPU{Name: d.Name, MemoryBytes: d.TotalMem, Multiprocessors: d.Multiprocessors, Driver: driverVersion(v), UUID: d.UUID}
		}
		return out, nil
	}
}
