// Fused bias + activation, forward and backward (heterps_cuda.h section 2).
//
// Forward and the backward without dbias are grid-stride elementwise loops,
// with float4 loads and stores when every pointer is 16-byte aligned (and, for
// the bias, the row length a multiple of 4), then a scalar tail. The backward
// with dbias tiles the matrix in 32-column strips: a warp reads 32 adjacent
// floats of one row (coalesced), 8 warps of a block take different rows, and
// each block leaves one partial column sum per column; a second pass adds the
// partials. A thread walks at most kRowsPerThread rows (a chunk of 32 rows a
// block) and a second-pass thread at most a few partials: a per-thread loop
// over hundreds of rows waits on one load after another, which at ctrdnn's
// 512 x 512 took ~20 us where the bytes need ~1 us. Up to kOneBlockRows rows
// one block of 32 x 32 threads takes a whole strip instead (at most 32 rows a
// thread): one launch and no scratch, where the GPU waits mostly on the host
// between small kernels. Chunks depend on the shape only, so the sums (and
// their bits) do not depend on the device.
#include "common.cuh"

namespace hps {
namespace {

template <int A, bool BIAS>
__global__ void fwd_k(int64_t n, int64_t cols, bool vec, const float *x, const float *bias,
                      float *y) {
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float4 *y4 = reinterpret_cast<float4 *>(y);
    for (int64_t i = gtid(); i < n4; i += gstride()) {
      float4 v = x4[i];
      if (BIAS) {
        const float4 b = *reinterpret_cast<const float4 *>(bias + (i * 4) % cols);
        v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
      }
      y4[i] = make_float4(act<A>(v.x), act<A>(v.y), act<A>(v.z), act<A>(v.w));
    }
    done = n4 * 4;
  }
  for (int64_t i = done + gtid(); i < n; i += gstride()) {
    float v = x[i];
    if (BIAS) v += bias[i % cols];
    y[i] = act<A>(v);
  }
}

template <int A>
__global__ void bwd_k(int64_t n, bool vec, const float *y, const float *dy, float *dx) {
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    const float4 *y4 = reinterpret_cast<const float4 *>(y);
    const float4 *dy4 = reinterpret_cast<const float4 *>(dy);
    float4 *dx4 = reinterpret_cast<float4 *>(dx);
    for (int64_t i = gtid(); i < n4; i += gstride()) {
      const float4 a = y4[i], d = dy4[i];
      dx4[i] = make_float4(dact<A>(a.x, d.x), dact<A>(a.y, d.y), dact<A>(a.z, d.z),
                           dact<A>(a.w, d.w));
    }
    done = n4 * 4;
  }
  for (int64_t i = done + gtid(); i < n; i += gstride()) dx[i] = dact<A>(y[i], dy[i]);
}

constexpr int kTileX = 32, kTileY = 8, kRowsPerThread = 4;
constexpr int64_t kMaxChunks = 4096, kOneBlockRows = 1024;

// Adds the TY threads' values v of each column of a 32 x TY block in row
// order and writes the column's sum to *out (when out is not null); every
// thread of the block calls it.
template <int TY>
__device__ __forceinline__ void store_column_sum(float v, float *out) {
  __shared__ float sh[TY][kTileX + 1];
  sh[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && out) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < TY; k++) s += sh[k][threadIdx.x];
    *out = s;
  }
}

// Block (bx, by) of 32 x TY threads covers columns [32 bx, 32 bx + 32) and
// rows by*TY + ty + k*TY*gridDim.y; part[by][c] receives its column sums
// (part == dbias when gridDim.y == 1).
template <int A, int TY>
__global__ void bwd_cols_k(int64_t rows, int64_t cols, const float *y, const float *dy,
                           float *dx, float *part) {
  const int64_t c = (int64_t)blockIdx.x * kTileX + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
#pragma unroll 8
    for (int64_t r = (int64_t)blockIdx.y * TY + threadIdx.y; r < rows;
         r += (int64_t)gridDim.y * TY) {
      const int64_t i = r * cols + c;
      const float g = dact<A>(y[i], dy[i]);
      dx[i] = g;
      acc += g;
    }
  }
  store_column_sum<TY>(acc, c < cols ? part + (int64_t)blockIdx.y * cols + c : nullptr);
}

// Block bx adds the partials part[0..nparts)[c] of columns c in [32 bx,
// 32 bx + 32): warp ty takes partials ty, ty + 8, ..., then warp 0 adds the
// eight sums in order.
__global__ void sum_parts_k(int64_t nparts, int64_t cols, const float *part, float *out) {
  const int64_t c = (int64_t)blockIdx.x * kTileX + threadIdx.x;
  float s = 0.0f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t p = threadIdx.y; p < nparts; p += kTileY) s += part[p * cols + c];
  }
  store_column_sum<kTileY>(s, c < cols ? out + c : nullptr);
}

int check(hps_act act, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || act < HPS_ACT_IDENTITY || act > HPS_ACT_TANH) return HPS_EINVAL;
  return HPS_OK;
}

}  // namespace
}  // namespace hps

using namespace hps;

extern "C" int hps_cuda_bias_act_fwd(cudaStream_t s, hps_act act, int64_t rows, int64_t cols,
                                     const float *x, const float *bias, float *y) {
  HPS_TRY(check(act, rows, cols));
  const int64_t n = rows * cols;
  if (n == 0) return HPS_OK;
  if (!x || !y) return HPS_EINVAL;
  const bool vec = aligned16(x) && aligned16(y) && (!bias || (aligned16(bias) && cols % 4 == 0));
  const unsigned g = blocks_for(vec ? n / 4 : n);
  HPS_ACT_SWITCH(act, A, {
    if (bias)
      fwd_k<A, true><<<g, kBlock, 0, s>>>(n, cols, vec, x, bias, y);
    else
      fwd_k<A, false><<<g, kBlock, 0, s>>>(n, cols, vec, x, bias, y);
  });
  return launched();
}

extern "C" int hps_cuda_bias_act_bwd(cudaStream_t s, hps_act act, int64_t rows, int64_t cols,
                                     const float *y, const float *dy, float *dx, float *dbias) {
  HPS_TRY(check(act, rows, cols));
  const int64_t n = rows * cols;
  if (dbias && cols > 0 && rows == 0) return hps_cuda_fill(s, cols, dbias, 0.0f);
  if (n == 0) return HPS_OK;
  if (!y || !dy || !dx) return HPS_EINVAL;
  if (!dbias) {
    const bool vec = aligned16(y) && aligned16(dy) && aligned16(dx);
    const unsigned g = blocks_for(vec ? n / 4 : n);
    HPS_ACT_SWITCH(act, A, bwd_k<A><<<g, kBlock, 0, s>>>(n, vec, y, dy, dx));
    return launched();
  }
  const unsigned xstrips = (unsigned)((cols + kTileX - 1) / kTileX);
  if (rows <= kOneBlockRows) {
    HPS_ACT_SWITCH(act, A,
                   bwd_cols_k<A, 32><<<xstrips, dim3(kTileX, 32), 0, s>>>(rows, cols, y, dy, dx, dbias));
    return launched();
  }
  // Row chunks depend on rows only (deterministic partials).
  int64_t ychunks = (rows + kTileY * kRowsPerThread - 1) / (kTileY * kRowsPerThread);
  if (ychunks > kMaxChunks) ychunks = kMaxChunks;
  const dim3 grid(xstrips, (unsigned)ychunks);
  const dim3 block(kTileX, kTileY);
  Scratch part(s);
  HPS_TRY(part.alloc((size_t)(ychunks * cols) * sizeof(float)));
  HPS_ACT_SWITCH(act, A,
                 bwd_cols_k<A, kTileY><<<grid, block, 0, s>>>(rows, cols, y, dy, dx, part.as<float>()));
  HPS_TRY(launched());
  sum_parts_k<<<xstrips, block, 0, s>>>(ychunks, cols, part.as<float>(), dbias);
  return launched();
}
