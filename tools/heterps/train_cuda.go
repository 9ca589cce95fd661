//go:build cuda

package main

import (
	"errors"

	"github.com/heterps/heterps/native"
)

// cudaBuild: this binary has the CUDA backend.
const cudaBuild = true

// newCUDATrainBackend is `heterps train --device cuda:N`'s backend: GPU N.
func newCUDATrainBackend(gpu int) (closingBackend, error) {
	b, err := native.NewCUDA(native.CUDAOptions{Device: gpu})
	if err != nil {
		return nil, err // a nil *CUDA in the interface would not be nil
	}
	return b, nil
}

// cudaGPUCount is how many GPUs the driver lists (none without a driver
// or device).
func cudaGPUCount() (int, error) {
	devs, err := native.CUDADevices()
	if errors.Is(err, native.ErrNoGPU) {
		return 0, nil
	}
	return len(devs), err
}
