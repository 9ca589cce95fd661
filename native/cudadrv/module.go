//go:build cuda

package cudadrv

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"

static CUstream hps_stream(uintptr_t s) { return (CUstream)s; }
static CUdeviceptr hps_dptr(uintptr_t p) { return (CUdeviceptr)p; }
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// DevicePtr is a device address.
type DevicePtr uintptr

// Stream is a CUstream (or cudaStream_t: the same handle) as an integer; 0 is
// the default stream.
type Stream uintptr

// Module is a loaded cubin, fatbin or PTX image.
type Module struct {
	c   *Context
	mod C.CUmodule
}

// LoadModule loads an image (cubin, fatbin, or PTX text, which the driver
// compiles for the device) into the context.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cudadrv: load module: empty image: %w", InvalidImage)
	}
	// A NUL after the image terminates PTX text; binary images ignore it.
	buf := C.malloc(C.size_t(len(image) + 1))
	defer C.free(buf)
	C.memcpy(buf, unsafe.Pointer(&image[0]), C.size_t(len(image)))
	*(*byte)(unsafe.Add(buf, len(image))) = 0
	m := &Module{c: c}
	err := c.Bind(func() error { return result(C.hps_cuModuleLoadData(&m.mod, buf)) })
	if err != nil {
		return nil, fmt.Errorf("cudadrv: load module: %w", err)
	}
	return m, nil
}

// Function looks up a kernel by its (extern "C" or mangled) name.
func (m *Module) Function(name string) (Function, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	f := Function{c: m.c, name: name}
	err := m.c.Bind(func() error { return result(C.hps_cuModuleGetFunction(&f.fn, m.mod, cname)) })
	if err != nil {
		return Function{}, fmt.Errorf("cudadrv: function %q: %w", name, err)
	}
	return f, nil
}

// Unload frees the module; its Functions must not be launched afterwards.
func (m *Module) Unload() error {
	return m.c.Bind(func() error { return result(C.hps_cuModuleUnload(m.mod)) })
}

// Function is a kernel of a loaded Module.
type Function struct {
	c    *Context
	fn   C.CUfunction
	name string
}

// Dim3 is a grid or block shape; zero components count as 1.
type Dim3 struct{ X, Y, Z int }

func (d Dim3) c() (x, y, z C.uint) {
	one := func(v int) C.uint {
		if v <= 0 {
			return 1
		}
		return C.uint(v)
	}
	return one(d.X), one(d.Y), one(d.Z)
}

// Launch queues the kernel on stream with the given arguments, which must
// match the kernel's parameters in order and type: DevicePtr, int32, uint32,
// int64, uint64, float32 or float64 (a plain int is refused as ambiguous).
func (f Function) Launch(grid, block Dim3, sharedBytes int, stream Stream, args ...any) error {
	vals, err := packArgs(args)
	if err != nil {
		return fmt.Errorf("cudadrv: launch %s: %w", f.name, err)
	}
	// One C block: len(args) pointers, then the 8-byte argument slots.
	n := len(args)
	block8 := C.malloc(C.size_t(8*n + len(vals) + 8))
	defer C.free(block8)
	ptrs := unsafe.Slice((*unsafe.Pointer)(block8), n+1)
	slots := unsafe.Add(block8, 8*n)
	if len(vals) > 0 {
		C.memcpy(slots, unsafe.Pointer(&vals[0]), C.size_t(len(vals)))
	}
	for i := range n {
		ptrs[i] = unsafe.Add(slots, 8*i)
	}
	gx, gy, gz := grid.c()
	bx, by, bz := block.c()
	return f.c.Bind(func() error {
		r := C.hps_cu_launch(f.fn, gx, gy, gz, bx, by, bz, C.uint(sharedBytes),
			C.hps_stream(C.uintptr_t(stream)), (*unsafe.Pointer)(block8))
		if err := result(r); err != nil {
			return fmt.Errorf("cudadrv: launch %s: %w", f.name, err)
		}
		return nil
	})
}

// packArgs lays each argument out in its own 8-byte little-endian slot.
func packArgs(args []any) ([]byte, error) {
	out := make([]byte, 8*len(args))
	for i, a := range args {
		slot := out[8*i : 8*i+8]
		switch v := a.(type) {
		case DevicePtr:
			binary.LittleEndian.PutUint64(slot, uint64(v))
		case int32:
			binary.LittleEndian.PutUint32(slot, uint32(v))
		case uint32:
			binary.LittleEndian.PutUint32(slot, v)
		case int64:
			binary.LittleEndian.PutUint64(slot, uint64(v))
		case uint64:
			binary.LittleEndian.PutUint64(slot, v)
		case float32:
			binary.LittleEndian.PutUint32(slot, math.Float32bits(v))
		case float64:
			binary.LittleEndian.PutUint64(slot, math.Float64bits(v))
		default:
			return nil, fmt.Errorf("argument %d: unsupported type %T: %w", i, a, InvalidValue)
		}
	}
	return out, nil
}

// MemAlloc allocates device memory.
func (c *Context) MemAlloc(bytes int) (DevicePtr, error) {
	var p C.CUdeviceptr
	err := c.Bind(func() error { return result(C.hps_cuMemAlloc(&p, C.size_t(bytes))) })
	if err != nil {
		return 0, fmt.Errorf("cudadrv: alloc %d bytes: %w", bytes, err)
	}
	return DevicePtr(p), nil
}

// MemFree frees memory from MemAlloc.
func (c *Context) MemFree(p DevicePtr) error {
	return c.Bind(func() error { return result(C.hps_cuMemFree(C.hps_dptr(C.uintptr_t(p)))) })
}

// CopyHtoD copies src to device address dst (synchronous).
func (c *Context) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.Bind(func() error {
		return result(C.hps_cuMemcpyHtoD(C.hps_dptr(C.uintptr_t(dst)), unsafe.Pointer(&src[0]), C.size_t(len(src))))
	})
}

// CopyDtoH copies len(dst) bytes from device address src (synchronous).
func (c *Context) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.Bind(func() error {
		return result(C.hps_cuMemcpyDtoH(unsafe.Pointer(&dst[0]), C.hps_dptr(C.uintptr_t(src)), C.size_t(len(dst))))
	})
}
