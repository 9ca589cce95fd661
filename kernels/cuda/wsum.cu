// Weighted sum of K buffers (heterps_cuda.h section 4): one pass over memory
// per 32 buffers. The pointers and weights travel by value in the kernel's
// parameters (no pointer array to upload); for k > 32 the later chunks add
// onto out, which keeps the order of additions of the CPU reference. Each
// element is read from every input before it is written, so out may be one
// of the inputs; with k > 32 such an out is first summed into scratch memory
// (a later chunk would otherwise read the partial sum as its input).
#include "common.cuh"

namespace hps {
namespace {

constexpr int kMaxK = 32;

struct Args {
  const float *g[kMaxK];
  float w[kMaxK];
};

template <bool ACCUM>
__global__ void wsum_k(int64_t n, int k, bool vec, Args a, float *out) {
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    float4 *o4 = reinterpret_cast<float4 *>(out);
    for (int64_t i = gtid(); i < n4; i += gstride()) {
      float4 s = ACCUM ? o4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int q = 0; q < k; q++) {
        const float4 v = reinterpret_cast<const float4 *>(a.g[q])[i];
        const float w = a.w[q];
        s.x += w * v.x, s.y += w * v.y, s.z += w * v.z, s.w += w * v.w;
      }
      o4[i] = s;
    }
    done = n4 * 4;
  }
  for (int64_t i = done + gtid(); i < n; i += gstride()) {
    float s = ACCUM ? out[i] : 0.0f;
    for (int q = 0; q < k; q++) s += a.w[q] * a.g[q][i];
    out[i] = s;
  }
}

}  // namespace
}  // namespace hps

using namespace hps;

extern "C" int hps_cuda_weighted_sum(cudaStream_t s, int64_t n, int64_t k,
                                     const float *const *g, const float *w, float *out) {
  if (n < 0 || k < 0) return HPS_EINVAL;
  if (n == 0) return HPS_OK;
  if (!out || (k > 0 && (!g || !w))) return HPS_EINVAL;
  if (k == 0) return hps_cuda_fill(s, n, out, 0.0f);
  bool aliased = false;
  for (int64_t q = 0; q < k; q++) {
    if (!g[q]) return HPS_EINVAL;
    aliased = aliased || g[q] == out;
  }
  Scratch tmp(s);
  float *dst = out;
  if (aliased && k > kMaxK) {
    HPS_TRY(tmp.alloc((size_t)n * sizeof(float)));
    out = tmp.as<float>();
  }
  for (int64_t q0 = 0; q0 < k; q0 += kMaxK) {
    const int kk = (int)(k - q0 < kMaxK ? k - q0 : kMaxK);
    Args a = {};
    bool vec = aligned16(out);
    for (int q = 0; q < kk; q++) {
      a.g[q] = g[q0 + q];
      a.w[q] = w[q0 + q];
      vec = vec && aligned16(a.g[q]);
    }
    const unsigned grid = blocks_for(vec ? n / 4 : n);
    if (q0 == 0)
      wsum_k<false><<<grid, kBlock, 0, s>>>(n, kk, vec, a, out);
    else
      wsum_k<true><<<grid, kBlock, 0, s>>>(n, kk, vec, a, out);
    HPS_TRY(launched());
  }
  return out == dst ? HPS_OK : hps_cuda_copy(s, n, out, dst);
}
