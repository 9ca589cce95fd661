//go:build cuda

package cudadrv

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// ErrClosed is returned by calls on a closed Context.
var ErrClosed = errors.New("cudadrv: context closed")

// Context is a device's primary context: the one the CUDA runtime (and so
// cuBLAS and the heterps kernels) uses on that device, which keeps driver and
// runtime calls on the same memory. Like gorgonia.org/cu's Ctx it owns a
// goroutine locked to one OS thread, on which Do runs calls; Bind runs a call
// on the caller's own thread instead, after making the context current there
// (cheaper: no hand-over between threads). Both are safe for concurrent use.
type Context struct {
	dev  Device
	ctx  C.CUcontext
	work chan func()
	done chan struct{}
	stop sync.Once
	wg   sync.WaitGroup
}

// PrimaryContext retains d's primary context (creating it on first use) and
// starts the context's thread. Close releases it.
func (d Device) PrimaryContext() (*Context, error) {
	c := &Context{dev: d, work: make(chan func()), done: make(chan struct{})}
	started := make(chan error, 1)
	c.wg.Add(1)
	go c.loop(started)
	if err := <-started; err != nil {
		c.wg.Wait()
		return nil, err
	}
	return c, nil
}

func (c *Context) loop(started chan<- error) {
	defer c.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ctx C.CUcontext
	if err := result(C.hps_cuDevicePrimaryCtxRetain(&ctx, C.CUdevice(c.dev))); err != nil {
		started <- fmt.Errorf("cudadrv: device %d: retain primary context: %w", int(c.dev), err)
		return
	}
	if err := result(C.hps_cuCtxSetCurrent(ctx)); err != nil {
		C.hps_cuDevicePrimaryCtxRelease(C.CUdevice(c.dev))
		started <- fmt.Errorf("cudadrv: device %d: set context: %w", int(c.dev), err)
		return
	}
	c.ctx = ctx
	started <- nil
	for {
		select {
		case f := <-c.work:
			f()
		case <-c.done:
			C.hps_cuCtxSynchronize()
			C.hps_cuCtxSetCurrent(nil)
			C.hps_cuDevicePrimaryCtxRelease(C.CUdevice(c.dev))
			return
		}
	}
}

// Device returns the context's device.
func (c *Context) Device() Device { return c.dev }

// Do runs f on the context's own locked thread and returns its error.
func (c *Context) Do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case c.work <- func() { errc <- f() }:
		return <-errc
	case <-c.done:
		return ErrClosed
	}
}

// Bind runs f on the calling goroutine's OS thread (locked for the call)
// with the context current there, and returns f's error.
func (c *Context) Bind(f func() error) error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := result(C.hps_cuCtxSetCurrent(c.ctx)); err != nil {
		return fmt.Errorf("cudadrv: set context: %w", err)
	}
	return f()
}

// Synchronize waits until all work queued on the device by this process is done.
func (c *Context) Synchronize() error {
	return c.Bind(func() error {
		if err := result(C.hps_cuCtxSynchronize()); err != nil {
			return fmt.Errorf("cudadrv: synchronize: %w", err)
		}
		return nil
	})
}

// MemInfo returns the free and total device memory in bytes.
func (c *Context) MemInfo() (free, total int64, err error) {
	err = c.Bind(func() error {
		var f, t C.size_t
		if err := result(C.hps_cuMemGetInfo(&f, &t)); err != nil {
			return fmt.Errorf("cudadrv: memory info: %w", err)
		}
		free, total = int64(f), int64(t)
		return nil
	})
	return free, total, err
}

// Close waits for the device to finish, releases the primary context and
// stops the context's thread. Later calls return ErrClosed.
func (c *Context) Close() error {
	c.stop.Do(func() { close(c.done) })
	c.wg.Wait()
	return nil
}
