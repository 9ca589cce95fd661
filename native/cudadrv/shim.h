/* shim.h — libcuda opened at run time: hps_cu_load() dlopens libcuda.so.1 and
 * resolves every driver function used by package cudadrv; each hps_<name>
 * forwards to it. The pointers are declared with the types of cuda.h, so a
 * changed signature fails the build. */
#ifndef HETERPS_CUDADRV_SHIM_H
#define HETERPS_CUDADRV_SHIM_H

#include <cuda.h>

/* The driver functions, by their cuda.h names (some are macros for _v2 names,
 * which is what gets resolved). */
#define HPS_CU_FUNCS(X)                                                   \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)   \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceTotalMem) \
  X(cuDeviceGetAttribute) X(cuDeviceGetUuid_v2) X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent)      \
  X(cuCtxSynchronize) X(cuMemGetInfo) X(cuModuleLoadData) X(cuModuleUnload) \
  X(cuModuleGetFunction) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree)     \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH)

/* Loads the library once (thread-safe). Returns 0, or -1 with a message in
 * err when the library or one of its functions is missing. */
int hps_cu_load(char *err, int errlen);

#define HPS_CU_DECLARE(f) extern __typeof__(&f) hps_p_##f;
HPS_CU_FUNCS(HPS_CU_DECLARE)
#undef HPS_CU_DECLARE

/* Forwarders that cgo can call (it cannot call through function pointers). */
static inline CUresult hps_cuInit(unsigned int flags) { return hps_p_cuInit(flags); }
static inline CUresult hps_cuDriverGetVersion(int *v) { return hps_p_cuDriverGetVersion(v); }
static inline CUresult hps_cuGetErrorName(CUresult r, const char **s) { return hps_p_cuGetErrorName(r, s); }
static inline CUresult hps_cuGetErrorString(CUresult r, const char **s) { return hps_p_cuGetErrorString(r, s); }
static inline CUresult hps_cuDeviceGetCount(int *n) { return hps_p_cuDeviceGetCount(n); }
static inline CUresult hps_cuDeviceGet(CUdevice *d, int i) { return hps_p_cuDeviceGet(d, i); }
static inline CUresult hps_cuDeviceGetName(char *name, int len, CUdevice d) { return hps_p_cuDeviceGetName(name, len, d); }
static inline CUresult hps_cuDeviceTotalMem(size_t *bytes, CUdevice d) { return hps_p_cuDeviceTotalMem(bytes, d); }
static inline CUresult hps_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) { return hps_p_cuDeviceGetAttribute(v, a, d); }
static inline CUresult hps_cuDeviceGetUuid(CUuuid *u, CUdevice d) { return hps_p_cuDeviceGetUuid_v2(u, d); }
static inline CUresult hps_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { return hps_p_cuDevicePrimaryCtxRetain(c, d); }
static inline CUresult hps_cuDevicePrimaryCtxRelease(CUdevice d) { return hps_p_cuDevicePrimaryCtxRelease(d); }
static inline CUresult hps_cuCtxSetCurrent(CUcontext c) { return hps_p_cuCtxSetCurrent(c); }
static inline CUresult hps_cuCtxGetCurrent(CUcontext *c) { return hps_p_cuCtxGetCurrent(c); }
static inline CUresult hps_cuCtxSynchronize(void) { return hps_p_cuCtxSynchronize(); }
static inline CUresult hps_cuMemGetInfo(size_t *free_bytes, size_t *total) { return hps_p_cuMemGetInfo(free_bytes, total); }
static inline CUresult hps_cuModuleLoadData(CUmodule *m, const void *image) { return hps_p_cuModuleLoadData(m, image); }
static inline CUresult hps_cuModuleUnload(CUmodule m) { return hps_p_cuModuleUnload(m); }
static inline CUresult hps_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) { return hps_p_cuModuleGetFunction(f, m, name); }
static inline CUresult hps_cuMemAlloc(CUdeviceptr *p, size_t bytes) { return hps_p_cuMemAlloc(p, bytes); }
static inline CUresult hps_cuMemFree(CUdeviceptr p) { return hps_p_cuMemFree(p); }
static inline CUresult hps_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) { return hps_p_cuMemcpyHtoD(dst, src, bytes); }
static inline CUresult hps_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) { return hps_p_cuMemcpyDtoH(dst, src, bytes); }

/* cuLaunchKernel with its parameters packed in one C block: n pointers to the
 * argument values (also in the block). */
static inline CUresult hps_cu_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                     unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                     CUstream s, void **params) {
  return hps_p_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, NULL);
}

#endif
