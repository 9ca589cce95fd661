//go:build cuda

package cudadrv

/*
#cgo CFLAGS: -O2 -I/usr/local/cuda/include
#cgo LDFLAGS: -ldl -lpthread
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Result is a CUresult status code other than CUDA_SUCCESS.
type Result int

// Status codes that callers test for.
const (
	InvalidValue    Result = 1
	OutOfMemory     Result = 2
	NotInitialized  Result = 3
	NoDevice        Result = 100
	InvalidDevice   Result = 101
	InvalidImage    Result = 200
	InvalidContext  Result = 201
	NotFound        Result = 500
	LaunchFailed    Result = 719
	IllegalAddress  Result = 700
	LaunchOutOfRes  Result = 701
	UnsupportedPTX  Result = 222
	InsufficientDrv Result = 35
)

// Error names the status as the driver does ("CUDA_ERROR_NO_DEVICE: no
// CUDA-capable device is detected").
func (r Result) Error() string {
	if !libLoaded.Load() {
		return fmt.Sprintf("CUresult %d", int(r))
	}
	var name, desc *C.char
	C.hps_cuGetErrorName(C.CUresult(r), &name)
	C.hps_cuGetErrorString(C.CUresult(r), &desc)
	if name == nil {
		return fmt.Sprintf("CUresult %d", int(r))
	}
	if desc == nil {
		return C.GoString(name)
	}
	return C.GoString(name) + ": " + C.GoString(desc)
}

// Is makes errors.Is(err, ErrNoDevice) true for the statuses that mean there
// is no usable device.
func (r Result) Is(target error) bool {
	return target == ErrNoDevice && (r == NoDevice || r == InvalidDevice || r == InsufficientDrv)
}

// Errors that Init and the functions after it wrap.
var (
	// ErrNoDriver: libcuda.so.1 could not be opened (no NVIDIA driver).
	ErrNoDriver = errors.New("cudadrv: no CUDA driver")
	// ErrNoDevice: the driver is there but finds no usable GPU.
	ErrNoDevice = errors.New("cudadrv: no CUDA device")
)

func result(r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return Result(r)
}

var (
	initOnce  sync.Once
	initErr   error
	libLoaded atomic.Bool // the driver's functions are resolved (cuInit may still have failed)
)

func doInit() {
	var buf [512]C.char
	if C.hps_cu_load(&buf[0], C.int(len(buf))) != 0 {
		initErr = fmt.Errorf("%w: %s", ErrNoDriver, C.GoString(&buf[0]))
		return
	}
	libLoaded.Store(true)
	if err := result(C.hps_cuInit(0)); err != nil {
		initErr = fmt.Errorf("cudadrv: cuInit: %w", err)
	}
}

// Init opens libcuda and initialises the driver, once; later calls return
// the first call's error. errors.Is(err, ErrNoDriver) or (err, ErrNoDevice)
// tells a CPU-only machine.
func Init() error {
	initOnce.Do(doInit)
	return initErr
}

// Version returns the driver's CUDA version, e.g. 13000 for 13.0.
func Version() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v C.int
	if err := result(C.hps_cuDriverGetVersion(&v)); err != nil {
		return 0, fmt.Errorf("cudadrv: driver version: %w", err)
	}
	return int(v), nil
}

// NumDevices returns the number of GPUs the driver sees.
func NumDevices() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n C.int
	if err := result(C.hps_cuDeviceGetCount(&n)); err != nil {
		return 0, fmt.Errorf("cudadrv: device count: %w", err)
	}
	return int(n), nil
}
