// Copy, fill and status names (heterps_cuda.h helpers).
#include <cublas_v2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

namespace hps {
namespace {

__global__ void fill_k(int64_t n, bool vec, float *dst, float v) {
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    float4 *d4 = reinterpret_cast<float4 *>(dst);
    for (int64_t i = gtid(); i < n4; i += gstride()) d4[i] = make_float4(v, v, v, v);
    done = n4 * 4;
  }
  for (int64_t i = done + gtid(); i < n; i += gstride()) dst[i] = v;
}

// pools[d]: 0 unknown, 1 device d has memory pools, 2 it has not (some
// virtualised GPUs). Racing first calls store the same value.
constexpr int kMaxDevices = 64;
int pools[kMaxDevices];

bool has_pools() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
  int known = __atomic_load_n(&pools[dev], __ATOMIC_RELAXED);
  if (known == 0) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess) v = 0;
    known = v ? 1 : 2;
    __atomic_store_n(&pools[dev], known, __ATOMIC_RELAXED);
  }
  return known == 1;
}

const char *blas_name(int s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

}  // namespace
}  // namespace hps

using namespace hps;

extern "C" int hps_cuda_malloc(cudaStream_t s, size_t bytes, void **p) {
  if (!p) return HPS_EINVAL;
  *p = nullptr;
  if (has_pools()) return status(cudaMallocAsync(p, bytes, s));
  return status(cudaMalloc(p, bytes));
}

extern "C" int hps_cuda_free(cudaStream_t s, void *p) {
  if (!p) return HPS_OK;
  if (has_pools()) return status(cudaFreeAsync(p, s));
  return status(cudaFree(p));  // synchronises: no queued kernel still uses p
}

extern "C" int hps_cuda_copy(cudaStream_t s, int64_t n, const float *src, float *dst) {
  if (n < 0) return HPS_EINVAL;
  if (n == 0 || src == dst) return HPS_OK;
  if (!src || !dst) return HPS_EINVAL;
  return status(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

extern "C" int hps_cuda_fill(cudaStream_t s, int64_t n, float *dst, float v) {
  if (n < 0) return HPS_EINVAL;
  if (n == 0) return HPS_OK;
  if (!dst) return HPS_EINVAL;
  const bool vec = aligned16(dst);
  fill_k<<<blocks_for(vec ? n / 4 : n), kBlock, 0, s>>>(n, vec, dst, v);
  return launched();
}

// ---- pinned staging ---------------------------------------------------------------

// Four chunks of 4 MiB: a large copy keeps the host's memcpy into one chunk
// and the DMA out of others going at once; 16 MiB of pinned memory a stream.
constexpr int kStageSlots = 4;
constexpr size_t kStageChunk = 4u << 20;

struct hps_cuda_stager {
  pthread_mutex_t mu;
  void *buf[kStageSlots];
  cudaEvent_t done[kStageSlots];  // recorded after the chunk's copy
  bool used[kStageSlots];         // done has been recorded
  int next;
};

extern "C" int hps_cuda_stager_create(hps_cuda_stager **out) {
  if (!out) return HPS_EINVAL;
  *out = nullptr;
  hps_cuda_stager *st = static_cast<hps_cuda_stager *>(calloc(1, sizeof *st));
  if (!st) return status(cudaErrorMemoryAllocation);
  pthread_mutex_init(&st->mu, nullptr);
  for (int i = 0; i < kStageSlots; i++) {
    cudaError_t e = cudaHostAlloc(&st->buf[i], kStageChunk, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&st->done[i], cudaEventDisableTiming);
    if (e != cudaSuccess) {
      hps_cuda_stager_destroy(st);
      return status(e);
    }
  }
  *out = st;
  return HPS_OK;
}

extern "C" void hps_cuda_stager_destroy(hps_cuda_stager *st) {
  if (!st) return;
  for (int i = 0; i < kStageSlots; i++) {
    if (st->done[i]) {
      if (st->used[i]) cudaEventSynchronize(st->done[i]);
      cudaEventDestroy(st->done[i]);
    }
    if (st->buf[i]) cudaFreeHost(st->buf[i]);
  }
  pthread_mutex_destroy(&st->mu);
  free(st);
}

extern "C" int hps_cuda_upload(hps_cuda_stager *st, cudaStream_t s, void *dst, const void *src,
                               size_t bytes) {
  if ((!dst || !src) && bytes > 0) return HPS_EINVAL;
  if (!st) return status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  pthread_mutex_lock(&st->mu);
  int rc = HPS_OK;
  for (size_t off = 0; off < bytes && rc == HPS_OK; off += kStageChunk) {
    const size_t n = bytes - off < kStageChunk ? bytes - off : kStageChunk;
    const int i = st->next;
    st->next = (i + 1) % kStageSlots;
    if (st->used[i] && (rc = status(cudaEventSynchronize(st->done[i]))) != HPS_OK) break;
    memcpy(st->buf[i], static_cast<const char *>(src) + off, n);
    rc = status(cudaMemcpyAsync(static_cast<char *>(dst) + off, st->buf[i], n,
                                cudaMemcpyHostToDevice, s));
    if (rc == HPS_OK) rc = status(cudaEventRecord(st->done[i], s));
    st->used[i] = rc == HPS_OK;
  }
  pthread_mutex_unlock(&st->mu);
  return rc;
}

extern "C" const char *hps_cuda_strerror(int st) {
  switch (st) {
    case HPS_OK:
      return "HPS_OK";
    case HPS_EINVAL:
      return "HPS_EINVAL";
    case HPS_ERANGE:
      return "HPS_ERANGE";
    case HPS_EORDER:
      return "HPS_EORDER";
    case HPS_CUDA_ENOBLAS:
      return "HPS_CUDA_ENOBLAS (libcublas could not be loaded)";
  }
  if (st >= HPS_CUDA_EBLAS) return blas_name(st - HPS_CUDA_EBLAS);
  if (st > 0) return cudaGetErrorName((cudaError_t)st);
  return "HPS_E_UNKNOWN";
}
