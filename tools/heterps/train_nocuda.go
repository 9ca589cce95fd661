//go:build !cuda

package main

// cudaBuild: this binary has the CUDA backend.
const cudaBuild = false

// newCUDATrainBackend refuses: this build has no CUDA backend. The error
// is the user's to fix (exit status 2).
func newCUDATrainBackend(int) (closingBackend, error) {
	return nil, usageError{errNoCUDA}
}

// cudaGPUCount refuses like newCUDATrainBackend.
func cudaGPUCount() (int, error) { return 0, usageError{errNoCUDA} }
