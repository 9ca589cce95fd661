// Softmax rows, BCE with logits and softmax cross-entropy (heterps_cuda.h
// section 7).
//
// A row of at most kWarpCols floats is handled by one warp (8 rows per
// block), which reads it from memory once into registers (lane l holds
// columns l, l+32, ...); a longer one by a whole block, which reads it three
// times. Either way three passes over the row: max, sum of exp(x - max),
// then the outputs. Loss sums are added in
// double, per block, and the per-block partials are added in block order by a
// single block: deterministic, and no atomics.
#include "common.cuh"

namespace hps {
namespace {

constexpr int64_t kWarpCols = 1024;
constexpr int kRowsPerBlock = kBlock / 32;

struct RowStats {
  float max, sum;  // sum of exp(x - max)
};

// Statistics of row x[0..cols) computed by a block: thread t adds columns
// t, t + blockDim.x, ...
__device__ RowStats block_row_stats(const float *x, int64_t cols) {
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[c]);
  m = block_max(m);
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(x[c] - m);
  return {m, block_sum(s)};
}

// A row of at most kWarpCols floats in one warp's registers.
constexpr int kLaneCols = kWarpCols / 32;

struct WarpRow {
  float v[kLaneCols];  // v[i] = x[lane + 32 i], for columns < cols
  RowStats st;
};

// Loads row x[0..cols) into the warp's registers and computes its
// statistics: lane l adds columns l, l + 32, ...
__device__ __forceinline__ void load_warp_row(const float *x, int64_t cols, int lane, WarpRow &r) {
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kLaneCols; i++) {
    const int64_t c = lane + 32 * i;
    r.v[i] = c < cols ? x[c] : 0.0f;
    if (c < cols) m = fmaxf(m, r.v[i]);
  }
  m = warp_max(m);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kLaneCols; i++)
    if (lane + 32 * i < cols) s += expf(r.v[i] - m);
  r.st = {m, warp_sum(s)};
}

__device__ void softmax_warp_row(const float *x, float *y, int64_t cols, int lane, int log) {
  WarpRow r;
  load_warp_row(x, cols, lane, r);
  if (log) {
    const float ls = logf(r.st.sum);
#pragma unroll
    for (int i = 0; i < kLaneCols; i++)
      if (lane + 32 * i < cols) y[lane + 32 * i] = (r.v[i] - r.st.max) - ls;
  } else {
    const float inv = 1.0f / r.st.sum;
#pragma unroll
    for (int i = 0; i < kLaneCols; i++)
      if (lane + 32 * i < cols) y[lane + 32 * i] = expf(r.v[i] - r.st.max) * inv;
  }
}

__device__ void softmax_block_row(const float *x, float *y, int64_t cols, int log) {
  const RowStats st = block_row_stats(x, cols);
  const int64_t lane = threadIdx.x, width = blockDim.x;
  if (log) {
    const float ls = logf(st.sum);
    for (int64_t c = lane; c < cols; c += width) y[c] = (x[c] - st.max) - ls;
  } else {
    const float inv = 1.0f / st.sum;
    for (int64_t c = lane; c < cols; c += width) y[c] = expf(x[c] - st.max) * inv;
  }
}

__global__ void softmax_warp_k(int64_t rows, int64_t cols, const float *x, float *y, int log) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5); r < rows;
       r += (int64_t)gridDim.x * kRowsPerBlock)
    softmax_warp_row(x + r * cols, y + r * cols, cols, lane, log);
}

__global__ void softmax_block_k(int64_t rows, int64_t cols, const float *x, float *y, int log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    softmax_block_row(x + r * cols, y + r * cols, cols, log);
}

// Cross-entropy of one row against its label; loss is -log softmax[label]
// (NaN for a label outside [0, cols), which the caller has ruled out).
__device__ double xent_block_row(const float *x, int64_t label, float scale, float *dx,
                                 int64_t cols) {
  const RowStats st = block_row_stats(x, cols);
  const int64_t lane = threadIdx.x, width = blockDim.x;
  const bool ok = label >= 0 && label < cols;
  if (dx) {
    const float inv = 1.0f / st.sum;
    for (int64_t c = lane; c < cols; c += width)
      dx[c] = scale * (expf(x[c] - st.max) * inv - (c == label ? 1.0f : 0.0f));
  }
  if (!ok) return NAN;
  return (double)(logf(st.sum) - (x[label] - st.max));
}

// xent_block_row for a row in one warp's registers.
__device__ double xent_warp_row(const float *x, int64_t label, float scale, float *dx,
                                int64_t cols, int lane) {
  WarpRow r;
  load_warp_row(x, cols, lane, r);
  const bool ok = label >= 0 && label < cols;
  if (dx) {
    const float inv = 1.0f / r.st.sum;
#pragma unroll
    for (int i = 0; i < kLaneCols; i++) {
      const int64_t c = lane + 32 * i;
      if (c < cols) dx[c] = scale * (expf(r.v[i] - r.st.max) * inv - (c == label ? 1.0f : 0.0f));
    }
  }
  if (!ok) return NAN;
  return (double)(logf(r.st.sum) - (x[label] - r.st.max));
}

// The xent kernels leave one loss partial per block: each warp (or the
// block) adds its rows' losses in row order, then the block's warps are
// added in warp order. The grid depends on rows only, so the partials do
// too; a sum over one partial per row read the rows' losses one after
// another in a single block, which took longer than the softmax itself.
__global__ void xent_warp_k(int64_t rows, int64_t cols, const float *x, const int64_t *labels,
                            float scale, float *dx, double *block_loss) {
  __shared__ double warp_loss[kRowsPerBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double sum = 0.0;
  for (int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + warp; r < rows;
       r += (int64_t)gridDim.x * kRowsPerBlock)
    sum += xent_warp_row(x + r * cols, labels[r], scale, dx ? dx + r * cols : nullptr, cols, lane);
  if (lane == 0) warp_loss[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double b = 0.0;
    for (int w = 0; w < kRowsPerBlock; w++) b += warp_loss[w];
    block_loss[blockIdx.x] = b;
  }
}

__global__ void xent_block_k(int64_t rows, int64_t cols, const float *x, const int64_t *labels,
                             float scale, float *dx, double *block_loss) {
  double sum = 0.0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    sum += xent_block_row(x + r * cols, labels[r], scale, dx ? dx + r * cols : nullptr, cols);
  if (threadIdx.x == 0) block_loss[blockIdx.x] = sum;
}

// One block adds part[0..n) in a fixed order into *out.
__global__ void sum_partials_k(int64_t n, const double *part, double *out) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

__device__ __forceinline__ float bce_term(float x, float y) {
  return (x > 0.0f ? x : 0.0f) - x * y + log1pf(expf(-fabsf(x)));
}

__global__ void bce_fwd_k(int64_t n, const float *x, const float *y, double *part) {
  double s = 0.0;
  for (int64_t i = gtid(); i < n; i += gstride()) s += (double)bce_term(x[i], y[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// For x >= 0 the gradient is computed as (1-y) - sigmoid(-x), so that a
// confident correct prediction keeps its tiny gradient (as the CPU does).
__global__ void bce_bwd_k(int64_t n, const float *x, const float *y, float scale, float *dx) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    const float v = x[i];
    dx[i] = scale * (v >= 0.0f ? (1.0f - y[i]) - sigmoidf_(-v) : sigmoidf_(v) - y[i]);
  }
}

unsigned row_blocks(int64_t rows, bool warp) {
  int64_t g = warp ? (rows + kRowsPerBlock - 1) / kRowsPerBlock : rows;
  if (g > kMaxBlocks) g = kMaxBlocks;
  return (unsigned)(g < 1 ? 1 : g);
}

}  // namespace
}  // namespace hps

using namespace hps;

extern "C" int hps_cuda_softmax_rows(cudaStream_t s, int64_t rows, int64_t cols, const float *x,
                                     float *y, int log) {
  if (rows < 0 || cols < 0) return HPS_EINVAL;
  if (rows == 0 || cols == 0) return HPS_OK;
  if (!x || !y) return HPS_EINVAL;
  const bool warp = cols <= kWarpCols;
  if (warp)
    softmax_warp_k<<<row_blocks(rows, true), kBlock, 0, s>>>(rows, cols, x, y, log);
  else
    softmax_block_k<<<row_blocks(rows, false), kBlock, 0, s>>>(rows, cols, x, y, log);
  return launched();
}

extern "C" int hps_cuda_bce_logits_fwd(cudaStream_t s, int64_t n, const float *logits,
                                       const float *labels, double *loss) {
  if (n < 0 || !loss) return HPS_EINVAL;
  if (n > 0 && (!logits || !labels)) return HPS_EINVAL;
  // The block count depends on n only, so the partials (and the sum) do too.
  const unsigned g = n == 0 ? 1 : blocks_for(n);
  Scratch part(s);
  HPS_TRY(part.alloc(g * sizeof(double)));
  bce_fwd_k<<<g, kBlock, 0, s>>>(n, logits, labels, part.as<double>());
  HPS_TRY(launched());
  sum_partials_k<<<1, kBlock, 0, s>>>(g, part.as<double>(), loss);
  return launched();
}

extern "C" int hps_cuda_bce_logits_bwd(cudaStream_t s, int64_t n, const float *logits,
                                       const float *labels, float scale, float *dx) {
  if (n < 0) return HPS_EINVAL;
  if (n == 0) return HPS_OK;
  if (!logits || !labels || !dx) return HPS_EINVAL;
  bce_bwd_k<<<blocks_for(n), kBlock, 0, s>>>(n, logits, labels, scale, dx);
  return launched();
}

extern "C" int hps_cuda_softmax_xent(cudaStream_t s, int64_t rows, int64_t cols,
                                     const float *logits, const int64_t *labels, float scale,
                                     float *dx, double *loss) {
  if (rows < 0 || cols < 0 || !loss) return HPS_EINVAL;
  if (rows > 0 && cols == 0) return HPS_EINVAL;  // no class can be a label
  if (rows > 0 && (!logits || !labels)) return HPS_EINVAL;
  const bool warp = cols <= kWarpCols;
  const unsigned g = rows == 0 ? 0 : row_blocks(rows, warp);
  Scratch block_loss(s);
  HPS_TRY(block_loss.alloc((size_t)g * sizeof(double)));
  if (g > 0) {
    if (warp)
      xent_warp_k<<<g, kBlock, 0, s>>>(rows, cols, logits, labels, scale, dx,
                                       block_loss.as<double>());
    else
      xent_block_k<<<g, kBlock, 0, s>>>(rows, cols, logits, labels, scale, dx,
                                        block_loss.as<double>());
    HPS_TRY(launched());
  }
  sum_partials_k<<<1, kBlock, 0, s>>>(g, block_loss.as<double>(), loss);
  return launched();
}
