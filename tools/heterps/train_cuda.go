//go:build cuda

package main

import "github.com/heterps/heterps/native"

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
