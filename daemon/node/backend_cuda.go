//go:build cuda

package node

import "github.com/heterps/heterps/native"

// cudaBuild: this binary has the CUDA backend.
const cudaBuild = true

func newCUDABackend(gpu int) (native.Backend, error) {
	return native.NewCUDA(native.CUDAOptions{Device: gpu})
}
