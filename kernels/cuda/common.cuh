// common.cuh — shared by the .cu files: launch sizing, status handling,
// stream-ordered scratch memory, activations and warp/block reductions.
#ifndef HETERPS_CUDA_COMMON_CUH
#define HETERPS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "heterps_cuda.h"

namespace hps {

constexpr int kBlock = 256;
// Grid-stride kernels get at most this many blocks: several waves' worth on
// an 132-SM part, and a fixed number, so that per-block partials (and hence
// results) do not depend on the device.
constexpr int64_t kMaxBlocks = 4096;

inline unsigned blocks_for(int64_t n, int block = kBlock) {
  int64_t g = (n + block - 1) / block;
  if (g < 1) g = 1;
  if (g > kMaxBlocks) g = kMaxBlocks;
  return (unsigned)g;
}

// The runtime keeps the last error of each host thread until
// cudaGetLastError reads it, and launched() reads it after every launch: a
// failed call (a bad copy, an allocation) would otherwise be reported again
// by the next launch on the same thread, as that launch's failure. Sticky
// errors (a kernel fault) stay whatever is read.
inline int status(cudaError_t e) {
  if (e == cudaSuccess) return HPS_OK;
  (void)cudaGetLastError();
  return (int)e;
}

// The status of the launch just made (a bad configuration, or a sticky error
// from earlier work).
inline int launched() { return status(cudaGetLastError()); }

// 16-byte alignment of every pointer, the condition for float4 access.
inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// Scratch is stream-ordered device memory, freed in stream order when it
// goes out of scope (after the kernels queued before that point).
struct Scratch {
  void *p = nullptr;
  cudaStream_t s;
  explicit Scratch(cudaStream_t stream) : s(stream) {}
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  int alloc(size_t bytes) {
    if (bytes == 0) bytes = 16;
    return hps_cuda_malloc(s, bytes, &p);
  }
  template <class T>
  T *as() const {
    return static_cast<T *>(p);
  }
  ~Scratch() {
    if (p) hps_cuda_free(s, p);
  }
};

#define HPS_TRY(expr)              \
  do {                             \
    const int hps_st_ = (expr);    \
    if (hps_st_ != HPS_OK) return hps_st_; \
  } while (0)

// ---- activations (same formulas as kernels/cpu/act.c and vmath.h) ----------

__device__ __forceinline__ float sigmoidf_(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);  // x < 0 or NaN: NaN propagates
  return e / (1.0f + e);
}

template <int A>
__device__ __forceinline__ float act(float v) {
  if (A == HPS_ACT_RELU) return v < 0.0f ? 0.0f : v;  // NaN propagates
  if (A == HPS_ACT_SIGMOID) return sigmoidf_(v);
  if (A == HPS_ACT_TANH) return tanhf(v);
  return v;
}

// dy * act'(x), written in terms of the output y = act(x).
template <int A>
__device__ __forceinline__ float dact(float y, float dy) {
  if (A == HPS_ACT_RELU) return y > 0.0f ? dy : 0.0f;
  if (A == HPS_ACT_SIGMOID) return dy * (y * (1.0f - y));
  if (A == HPS_ACT_TANH) return dy * (1.0f - y * y);
  return dy;
}

// Runs the statement list with A bound, as a compile-time constant, to the
// activation act; returns HPS_EINVAL from the enclosing function for an
// unknown one.
#define HPS_ACT_SWITCH(act, A, ...)                                  \
  switch (act) {                                                     \
    case HPS_ACT_IDENTITY: {                                         \
      constexpr int A = HPS_ACT_IDENTITY;                            \
      __VA_ARGS__;                                                   \
    } break;                                                         \
    case HPS_ACT_RELU: {                                             \
      constexpr int A = HPS_ACT_RELU;                                \
      __VA_ARGS__;                                                   \
    } break;                                                         \
    case HPS_ACT_SIGMOID: {                                          \
      constexpr int A = HPS_ACT_SIGMOID;                             \
      __VA_ARGS__;                                                   \
    } break;                                                         \
    case HPS_ACT_TANH: {                                             \
      constexpr int A = HPS_ACT_TANH;                                \
      __VA_ARGS__;                                                   \
    } break;                                                         \
    default:                                                         \
      return HPS_EINVAL;                                             \
  }

// ---- reductions -------------------------------------------------------------

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of kBlock threads (a multiple of 32); every thread gets the
// result. The order of additions depends on the block size only.
template <class T>
__device__ T block_sum(T v) {
  __shared__ T part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // part may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  v = lane < nwarps ? part[lane] : T(0);
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  v = lane < nwarps ? part[lane] : -INFINITY;
  return warp_max(v);
}

__device__ __forceinline__ int64_t gtid() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t gstride() { return (int64_t)gridDim.x * blockDim.x; }

}  // namespace hps

#endif
