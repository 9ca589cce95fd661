// Package cudadrv is a thin binding of the CUDA driver API in the shape of
// gorgonia.org/cu: a Device, a Context whose calls run on one locked OS
// thread, Module.Function and Launch, and CUDA status codes as Go errors.
//
// It exists because gorgonia.org/cu v0.9.6 cannot serve heterps: it calls
// cuInit in its package init and exits the process when that fails, so a
// binary built with CUDA could not start on the CPU-only machines of a
// heterogeneous cluster (or run tests that skip without a GPU); it links
// libcuda at build time; and it does not compile against CUDA 13 headers
// (cuCtxCreate, cuMemAdvise, cuMemPrefetchAsync and the graph-edge calls
// changed signature). This package opens libcuda.so.1 at run time instead:
// Init reports ErrNoDriver or ErrNoDevice, and nothing else fails.
//
// Everything but this comment and FormatUUID is behind the cuda build tag.
package cudadrv
