// Optimiser updates, dense and sparse-row (heterps_cuda.h section 5). The
// per-element formulas are those of kernels/cpu/optim.c; the hyper-parameters
// (Adam's bias corrections included) are derived once per call on the host,
// in double as on the CPU, and travel by value.
#include <math.h>

#include "common.cuh"

namespace hps {
namespace {

struct Params {
  float lr, mom, wd, eps;
  float b1, omb1, b2, omb2;
  float c1, c2;  // 1/(1-b1^t), 1/(1-b2^t)
};

Params make_params(const hps_opt *o) {
  Params p = {o->lr,    o->momentum,        o->weight_decay, o->eps, o->beta1,
              1.0f - o->beta1, o->beta2, 1.0f - o->beta2, 1.0f,    1.0f};
  if (o->step >= 1) {
    p.c1 = (float)(1.0 / (1.0 - pow((double)o->beta1, (double)o->step)));
    p.c2 = (float)(1.0 / (1.0 - pow((double)o->beta2, (double)o->step)));
  }
  return p;
}

enum Kind { kSGD, kSGDMomentum, kAdagrad, kAdam };

// One element: w, g and the state s1 (velocity, accumulator or first moment)
// and s2 (second moment).
template <int K>
__device__ __forceinline__ void step(const Params &p, float &w, float g, float &s1, float &s2) {
  const float gi = g + p.wd * w;
  if (K == kSGD) {
    w -= p.lr * gi;
  } else if (K == kSGDMomentum) {
    s1 = p.mom * s1 + gi;
    w -= p.lr * s1;
  } else if (K == kAdagrad) {
    s1 += gi * gi;
    w -= p.lr * gi / (sqrtf(s1) + p.eps);
  } else {
    s1 = p.b1 * s1 + p.omb1 * gi;
    s2 = p.b2 * s2 + p.omb2 * gi * gi;
    w -= p.lr * (s1 * p.c1) / (sqrtf(s2 * p.c2) + p.eps);
  }
}

__host__ __device__ constexpr bool uses1(int k) { return k != kSGD; }
__host__ __device__ constexpr bool uses2(int k) { return k == kAdam; }

template <int K>
__global__ void dense_k(int64_t n, bool vec, Params p, float *w, const float *g, float *s1,
                        float *s2) {
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    for (int64_t i = gtid(); i < n4; i += gstride()) {
      float4 w4 = reinterpret_cast<float4 *>(w)[i];
      const float4 g4 = reinterpret_cast<const float4 *>(g)[i];
      float4 a4 = uses1(K) ? reinterpret_cast<float4 *>(s1)[i] : float4{};
      float4 b4 = uses2(K) ? reinterpret_cast<float4 *>(s2)[i] : float4{};
      step<K>(p, w4.x, g4.x, a4.x, b4.x);
      step<K>(p, w4.y, g4.y, a4.y, b4.y);
      step<K>(p, w4.z, g4.z, a4.z, b4.z);
      step<K>(p, w4.w, g4.w, a4.w, b4.w);
      reinterpret_cast<float4 *>(w)[i] = w4;
      if (uses1(K)) reinterpret_cast<float4 *>(s1)[i] = a4;
      if (uses2(K)) reinterpret_cast<float4 *>(s2)[i] = b4;
    }
    done = n4 * 4;
  }
  for (int64_t i = done + gtid(); i < n; i += gstride()) {
    float wi = w[i], a = uses1(K) ? s1[i] : 0.0f, b = uses2(K) ? s2[i] : 0.0f;
    step<K>(p, wi, g[i], a, b);
    w[i] = wi;
    if (uses1(K)) s1[i] = a;
    if (uses2(K)) s2[i] = b;
  }
}

// Rows: threadIdx.y picks a listed row, threadIdx.x walks its dim floats.
template <int K>
__global__ void rows_k(int64_t table_rows, int64_t dim, int64_t nrows, const int64_t *rows,
                       Params p, float *w, const float *g, float *s1, float *s2) {
  for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < nrows;
       r += (int64_t)gridDim.x * blockDim.y) {
    const int64_t row = rows[r];
    if (row < 0 || row >= table_rows) continue;
    const int64_t base = row * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float wi = w[base + d], a = uses1(K) ? s1[base + d] : 0.0f,
            b = uses2(K) ? s2[base + d] : 0.0f;
      step<K>(p, wi, g[r * dim + d], a, b);
      w[base + d] = wi;
      if (uses1(K)) s1[base + d] = a;
      if (uses2(K)) s2[base + d] = b;
    }
  }
}

// Threads per row: the power of two covering dim, at most 32; rows per block
// fill 256 threads.
dim3 row_block(int64_t dim) {
  unsigned tx = 1;
  while (tx < 32 && tx < dim) tx <<= 1;
  return dim3(tx, kBlock / tx);
}

template <int K>
int dense(cudaStream_t s, int64_t n, float *w, const float *g, float *s1, float *s2,
          const hps_opt *o) {
  if (n < 0 || !o) return HPS_EINVAL;
  if (n == 0) return HPS_OK;
  if (!w || !g || (uses1(K) && !s1) || (uses2(K) && !s2)) return HPS_EINVAL;
  const bool vec = aligned16(w) && aligned16(g) && (!uses1(K) || aligned16(s1)) &&
                   (!uses2(K) || aligned16(s2));
  dense_k<K><<<blocks_for(vec ? n / 4 : n), kBlock, 0, s>>>(n, vec, make_params(o), w, g, s1, s2);
  return launched();
}

template <int K>
int sparse(cudaStream_t s, int64_t table_rows, int64_t dim, float *w, int64_t nrows,
           const int64_t *rows, const float *g, float *s1, float *s2, const hps_opt *o) {
  if (table_rows < 0 || dim < 0 || nrows < 0 || !o) return HPS_EINVAL;
  if (nrows == 0 || dim == 0) return HPS_OK;
  if (!w || !rows || !g || (uses1(K) && !s1) || (uses2(K) && !s2)) return HPS_EINVAL;
  const dim3 block = row_block(dim);
  int64_t grid = (nrows + block.y - 1) / block.y;
  if (grid > kMaxBlocks) grid = kMaxBlocks;
  rows_k<K><<<(unsigned)grid, block, 0, s>>>(table_rows, dim, nrows, rows, make_params(o), w, g,
                                              s1, s2);
  return launched();
}

}  // namespace
}  // namespace hps

using namespace hps;

extern "C" int hps_cuda_sgd(cudaStream_t s, int64_t n, float *w, const float *g, float *v,
                            const hps_opt *o) {
  if (v) return dense<kSGDMomentum>(s, n, w, g, v, nullptr, o);
  return dense<kSGD>(s, n, w, g, nullptr, nullptr, o);
}

extern "C" int hps_cuda_adagrad(cudaStream_t s, int64_t n, float *w, const float *g, float *a,
                                const hps_opt *o) {
  return dense<kAdagrad>(s, n, w, g, a, nullptr, o);
}

extern "C" int hps_cuda_adam(cudaStream_t s, int64_t n, float *w, const float *g, float *m,
                             float *v, const hps_opt *o) {
  return dense<kAdam>(s, n, w, g, m, v, o);
}

extern "C" int hps_cuda_sgd_rows(cudaStream_t s, int64_t table_rows, int64_t dim, float *w,
                                 int64_t nrows, const int64_t *rows, const float *g, float *v,
                                 const hps_opt *o) {
  if (v)
    return sparse<kSGDMomentum>(s, table_rows, dim, w, nrows, rows, g, v, nullptr, o);
  return sparse<kSGD>(s, table_rows, dim, w, nrows, rows, g, nullptr, nullptr, o);
}

extern "C" int hps_cuda_adagrad_rows(cudaStream_t s, int64_t table_rows, int64_t dim, float *w,
                                     int64_t nrows, const int64_t *rows, const float *g,
                                     float *a, const hps_opt *o) {
  return sparse<kAdagrad>(s, table_rows, dim, w, nrows, rows, g, a, nullptr, o);
}

extern "C" int hps_cuda_adam_rows(cudaStream_t s, int64_t table_rows, int64_t dim, float *w,
                                  int64_t nrows, const int64_t *rows, const float *g, float *m,
                                  float *v, const hps_opt *o) {
  return sparse<kAdam>(s, table_rows, dim, w, nrows, rows, g, m, v, o);
}
