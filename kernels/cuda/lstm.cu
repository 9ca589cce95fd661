// LSTM cell, pointwise part (heterps_cuda.h section 6): one thread per
// (sample, hidden unit), reading its four gates at stride hidden, so that
// adjacent threads touch adjacent floats of each gate block.
#include "common.cuh"

namespace hps {
namespace {

__global__ void fwd_k(int64_t batch, int64_t hidden, const float *z, const float *bias,
                      const float *c_prev, float *gates, float *c, float *h) {
  const int64_t n = batch * hidden;
  for (int64_t t = gtid(); t < n; t += gstride()) {
    const int64_t b = t / hidden, j = t % hidden;
    const int64_t zi = b * 4 * hidden + j;
    float pi = z[zi], pf = z[zi + hidden], pg = z[zi + 2 * hidden], po = z[zi + 3 * hidden];
    if (bias) {
      pi += bias[j];
      pf += bias[j + hidden];
      pg += bias[j + 2 * hidden];
      po += bias[j + 3 * hidden];
    }
    const float i = sigmoidf_(pi), f = sigmoidf_(pf), g = tanhf(pg), o = sigmoidf_(po);
    gates[zi] = i;
    gates[zi + hidden] = f;
    gates[zi + 2 * hidden] = g;
    gates[zi + 3 * hidden] = o;
    const float cc = f * c_prev[t] + i * g;
    c[t] = cc;
    h[t] = o * tanhf(cc);
  }
}

__global__ void bwd_k(int64_t batch, int64_t hidden, const float *gates, const float *c_prev,
                      const float *c, const float *dh, const float *dc, float *dz,
                      float *dc_prev) {
  const int64_t n = batch * hidden;
  for (int64_t t = gtid(); t < n; t += gstride()) {
    const int64_t b = t / hidden, j = t % hidden;
    const int64_t zi = b * 4 * hidden + j;
    const float i = gates[zi], f = gates[zi + hidden], g = gates[zi + 2 * hidden],
                o = gates[zi + 3 * hidden];
    const float tc = tanhf(c[t]);
    const float dct = (dc ? dc[t] : 0.0f) + dh[t] * o * (1.0f - tc * tc);
    dz[zi] = dct * g * (i * (1.0f - i));
    dz[zi + hidden] = dct * c_prev[t] * (f * (1.0f - f));
    dz[zi + 2 * hidden] = dct * i * (1.0f - g * g);
    dz[zi + 3 * hidden] = dh[t] * tc * (o * (1.0f - o));
    dc_prev[t] = dct * f;
  }
}

}  // namespace
}  // namespace hps

using namespace hps;

extern "C" int hps_cuda_lstm_fwd(cudaStream_t s, int64_t batch, int64_t hidden, const float *z,
                                 const float *bias, const float *c_prev, float *gates, float *c,
                                 float *h) {
  if (batch < 0 || hidden < 0) return HPS_EINVAL;
  const int64_t n = batch * hidden;
  if (n == 0) return HPS_OK;
  if (!z || !c_prev || !gates || !c || !h) return HPS_EINVAL;
  fwd_k<<<blocks_for(n), kBlock, 0, s>>>(batch, hidden, z, bias, c_prev, gates, c, h);
  return launched();
}

extern "C" int hps_cuda_lstm_bwd(cudaStream_t s, int64_t batch, int64_t hidden,
                                 const float *gates, const float *c_prev, const float *c,
                                 const float *dh, const float *dc, float *dz, float *dc_prev) {
  if (batch < 0 || hidden < 0) return HPS_EINVAL;
  const int64_t n = batch * hidden;
  if (n == 0) return HPS_OK;
  if (!gates || !c_prev || !c || !dh || !dz || !dc_prev) return HPS_EINVAL;
  bwd_k<<<blocks_for(n), kBlock, 0, s>>>(batch, hidden, gates, c_prev, c, dh, dc, dz, dc_prev);
  return launched();
}
