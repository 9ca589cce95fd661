/* A stand-in libcuda.so.1 for tests: a driver that finds no GPU. Every entry
 * point that package native/cudadrv resolves exists and fails with
 * CUDA_ERROR_NO_DEVICE (100), as the real driver does on a machine whose GPU
 * is missing or hidden. scripts/cuda-check.sh builds it and runs the CUDA
 * tests against it, so that the "driver present, no device" path is tested
 * on machines without a GPU (the "no driver at all" path is tested without
 * it). */
#define NO_DEVICE 100
#define FAIL(name) \
  int name(void) { return NO_DEVICE; }

FAIL(cuInit)
FAIL(cuDriverGetVersion)
FAIL(cuDeviceGetCount)
FAIL(cuDeviceGet)
FAIL(cuDeviceGetName)
FAIL(cuDeviceTotalMem_v2)
FAIL(cuDeviceGetAttribute)
FAIL(cuDeviceGetUuid_v2)
FAIL(cuDevicePrimaryCtxRetain)
FAIL(cuDevicePrimaryCtxRelease_v2)
FAIL(cuCtxSetCurrent)
FAIL(cuCtxGetCurrent)
FAIL(cuCtxSynchronize)
FAIL(cuMemGetInfo_v2)
FAIL(cuModuleLoadData)
FAIL(cuModuleUnload)
FAIL(cuModuleGetFunction)
FAIL(cuLaunchKernel)
FAIL(cuMemAlloc_v2)
FAIL(cuMemFree_v2)
FAIL(cuMemcpyHtoD_v2)
FAIL(cuMemcpyDtoH_v2)

int cuGetErrorName(int r, const char **s) {
  *s = r == NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
  return 0;
}

int cuGetErrorString(int r, const char **s) {
  *s = r == NO_DEVICE ? "no CUDA-capable device is detected" : "unknown error";
  return 0;
}
