//go:build !cuda

package node

import "github.com/heterps/heterps/native"

// cudaBuild: this binary has the CUDA backend.
const cudaBuild = false

func newCUDABackend(int) (native.Backend, error) { return nil, errNoCUDA }
