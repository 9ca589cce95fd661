/* The pointwise part of an LSTM cell, forward and backward (heterps_kernels.h
 * section 6): the scalar reference and its AVX2 and AVX-512 twins. Rows are
 * batch samples; within a row, gate k of unit j sits at column k*hidden + j. */
#include "heterps_kernels.h"
#include "vmath.h"

/* ---- scalar reference ------------------------------------------------- */

static void fwd_scalar(int64_t batch, int64_t hidden, const float *z, const float *bias,
                       const float *c_prev, float *gates, float *c, float *h) {
  const int64_t H = hidden;
  for (int64_t b = 0; b < batch; b++) {
    const float *zr = z + b * 4 * H;
    float *gr = gates + b * 4 * H;
    for (int64_t j = 0; j < H; j++) {
      float zi = zr[j], zf = zr[H + j], zg = zr[2 * H + j], zo = zr[3 * H + j];
      if (bias) {
        zi += bias[j], zf += bias[H + j], zg += bias[2 * H + j], zo += bias[3 * H + j];
      }
      const float i = hps_sigmoidf(zi), f = hps_sigmoidf(zf), g = tanhf(zg), o = hps_sigmoidf(zo);
      gr[j] = i, gr[H + j] = f, gr[2 * H + j] = g, gr[3 * H + j] = o;
      const float cv = f * c_prev[b * H + j] + i * g;
      c[b * H + j] = cv;
      h[b * H + j] = o * tanhf(cv);
    }
  }
}

static void bwd_scalar(int64_t batch, int64_t hidden, const float *gates, const float *c_prev,
                       const float *c, const float *dh, const float *dc, float *dz,
                       float *dc_prev) {
  const int64_t H = hidden;
  for (int64_t b = 0; b < batch; b++) {
    const float *gr = gates + b * 4 * H;
    float *dr = dz + b * 4 * H;
    for (int64_t j = 0; j < H; j++) {
      const int64_t k = b * H + j;
      const float i = gr[j], f = gr[H + j], g = gr[2 * H + j], o = gr[3 * H + j];
      const float tc = tanhf(c[k]);
      const float dct = (dc ? dc[k] : 0.0f) + dh[k] * o * (1.0f - tc * tc);
      dr[j] = dct * g * (i * (1.0f - i));
      dr[H + j] = dct * c_prev[k] * (f * (1.0f - f));
      dr[2 * H + j] = dct * i * (1.0f - g * g);
      dr[3 * H + j] = dh[k] * tc * (o * (1.0f - o));
      dc_prev[k] = dct * f;
    }
  }
}

/* ---- AVX2 ----------------------------------------------------------------- */

/* Loads lanes [j, j+8) of p, or only the lanes in tail. */
#define LD8(p, j, tail, full) ((full) ? _mm256_loadu_ps((p) + (j)) : _mm256_maskload_ps((p) + (j), (tail)))
#define ST8(p, j, tail, full, v)                  \
  do {                                            \
    if (full)                                     \
      _mm256_storeu_ps((p) + (j), (v));           \
    else                                          \
      _mm256_maskstore_ps((p) + (j), (tail), (v)); \
  } while (0)

HPS_AVX2 static void fwd_avx2(int64_t batch, int64_t hidden, const float *z, const float *bias,
                              const float *c_prev, float *gates, float *c, float *h) {
  const int64_t H = hidden;
  for (int64_t b = 0; b < batch; b++) {
    const float *zr = z + b * 4 * H, *cp = c_prev + b * H;
    float *gr = gates + b * 4 * H, *cr = c + b * H, *hr = h + b * H;
    for (int64_t j = 0; j < H; j += 8) {
      const int full = H - j >= 8;
      const __m256i tail = hps_v8_tailmask(full ? 8 : H - j);
      __m256 zi = LD8(zr, j, tail, full), zf = LD8(zr, H + j, tail, full);
      __m256 zg = LD8(zr, 2 * H + j, tail, full), zo = LD8(zr, 3 * H + j, tail, full);
      if (bias) {
        zi = _mm256_add_ps(zi, LD8(bias, j, tail, full));
        zf = _mm256_add_ps(zf, LD8(bias, H + j, tail, full));
        zg = _mm256_add_ps(zg, LD8(bias, 2 * H + j, tail, full));
        zo = _mm256_add_ps(zo, LD8(bias, 3 * H + j, tail, full));
      }
      const __m256 i = hps_v8_sigmoid(zi), f = hps_v8_sigmoid(zf);
      const __m256 g = hps_v8_tanh(zg), o = hps_v8_sigmoid(zo);
      ST8(gr, j, tail, full, i);
      ST8(gr, H + j, tail, full, f);
      ST8(gr, 2 * H + j, tail, full, g);
      ST8(gr, 3 * H + j, tail, full, o);
      const __m256 cv = _mm256_fmadd_ps(f, LD8(cp, j, tail, full), _mm256_mul_ps(i, g));
      ST8(cr, j, tail, full, cv);
      ST8(hr, j, tail, full, _mm256_mul_ps(o, hps_v8_tanh(cv)));
    }
  }
}

HPS_AVX2 static void bwd_avx2(int64_t batch, int64_t hidden, const float *gates,
                              const float *c_prev, const float *c, const float *dh,
                              const float *dc, float *dz, float *dc_prev) {
  const int64_t H = hidden;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t b = 0; b < batch; b++) {
    const float *gr = gates + b * 4 * H;
    const float *cp = c_prev + b * H, *cr = c + b * H, *dhr = dh + b * H;
    const float *dcr = dc ? dc + b * H : NULL;
    float *dr = dz + b * 4 * H, *dcp = dc_prev + b * H;
    for (int64_t j = 0; j < H; j += 8) {
      const int full = H - j >= 8;
      const __m256i tail = hps_v8_tailmask(full ? 8 : H - j);
      const __m256 i = LD8(gr, j, tail, full), f = LD8(gr, H + j, tail, full);
      const __m256 g = LD8(gr, 2 * H + j, tail, full), o = LD8(gr, 3 * H + j, tail, full);
      const __m256 dhv = LD8(dhr, j, tail, full);
      const __m256 tc = hps_v8_tanh(LD8(cr, j, tail, full));
      __m256 dct = _mm256_mul_ps(_mm256_mul_ps(dhv, o), _mm256_fnmadd_ps(tc, tc, one));
      if (dcr) dct = _mm256_add_ps(LD8(dcr, j, tail, full), dct);
      const __m256 di = _mm256_mul_ps(_mm256_mul_ps(dct, g), _mm256_mul_ps(i, _mm256_sub_ps(one, i)));
      const __m256 df = _mm256_mul_ps(_mm256_mul_ps(dct, LD8(cp, j, tail, full)),
                                      _mm256_mul_ps(f, _mm256_sub_ps(one, f)));
      const __m256 dg = _mm256_mul_ps(_mm256_mul_ps(dct, i), _mm256_fnmadd_ps(g, g, one));
      const __m256 dov = _mm256_mul_ps(_mm256_mul_ps(dhv, tc), _mm256_mul_ps(o, _mm256_sub_ps(one, o)));
      ST8(dr, j, tail, full, di);
      ST8(dr, H + j, tail, full, df);
      ST8(dr, 2 * H + j, tail, full, dg);
      ST8(dr, 3 * H + j, tail, full, dov);
      ST8(dcp, j, tail, full, _mm256_mul_ps(dct, f));
    }
  }
}

/* ---- AVX-512 -------------------------------------------------------------- */

HPS_AVX512 static void fwd_avx512(int64_t batch, int64_t hidden, const float *z,
                                  const float *bias, const float *c_prev, float *gates,
                                  float *c, float *h) {
  const int64_t H = hidden;
  for (int64_t b = 0; b < batch; b++) {
    const float *zr = z + b * 4 * H, *cp = c_prev + b * H;
    float *gr = gates + b * 4 * H, *cr = c + b * H, *hr = h + b * H;
    for (int64_t j = 0; j < H; j += 16) {
      const __mmask16 m = hps_v16_tailmask(H - j >= 16 ? 16 : H - j);
      __m512 zi = _mm512_maskz_loadu_ps(m, zr + j), zf = _mm512_maskz_loadu_ps(m, zr + H + j);
      __m512 zg = _mm512_maskz_loadu_ps(m, zr + 2 * H + j);
      __m512 zo = _mm512_maskz_loadu_ps(m, zr + 3 * H + j);
      if (bias) {
        zi = _mm512_add_ps(zi, _mm512_maskz_loadu_ps(m, bias + j));
        zf = _mm512_add_ps(zf, _mm512_maskz_loadu_ps(m, bias + H + j));
        zg = _mm512_add_ps(zg, _mm512_maskz_loadu_ps(m, bias + 2 * H + j));
        zo = _mm512_add_ps(zo, _mm512_maskz_loadu_ps(m, bias + 3 * H + j));
      }
      const __m512 i = hps_v16_sigmoid(zi), f = hps_v16_sigmoid(zf);
      const __m512 g = hps_v16_tanh(zg), o = hps_v16_sigmoid(zo);
      _mm512_mask_storeu_ps(gr + j, m, i);
      _mm512_mask_storeu_ps(gr + H + j, m, f);
      _mm512_mask_storeu_ps(gr + 2 * H + j, m, g);
      _mm512_mask_storeu_ps(gr + 3 * H + j, m, o);
      const __m512 cv = _mm512_fmadd_ps(f, _mm512_maskz_loadu_ps(m, cp + j), _mm512_mul_ps(i, g));
      _mm512_mask_storeu_ps(cr + j, m, cv);
      _mm512_mask_storeu_ps(hr + j, m, _mm512_mul_ps(o, hps_v16_tanh(cv)));
    }
  }
}

HPS_AVX512 static void bwd_avx512(int64_t batch, int64_t hidden, const float *gates,
                                  const float *c_prev, const float *c, const float *dh,
                                  const float *dc, float *dz, float *dc_prev) {
  const int64_t H = hidden;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t b = 0; b < batch; b++) {
    const float *gr = gates + b * 4 * H;
    const float *cp = c_prev + b * H, *cr = c + b * H, *dhr = dh + b * H;
    const float *dcr = dc ? dc + b * H : NULL;
    float *dr = dz + b * 4 * H, *dcp = dc_prev + b * H;
    for (int64_t j = 0; j < H; j += 16) {
      const __mmask16 m = hps_v16_tailmask(H - j >= 16 ? 16 : H - j);
      const __m512 i = _mm512_maskz_loadu_ps(m, gr + j), f = _mm512_maskz_loadu_ps(m, gr + H + j);
      const __m512 g = _mm512_maskz_loadu_ps(m, gr + 2 * H + j);
      const __m512 o = _mm512_maskz_loadu_ps(m, gr + 3 * H + j);
      const __m512 dhv = _mm512_maskz_loadu_ps(m, dhr + j);
      const __m512 tc = hps_v16_tanh(_mm512_maskz_loadu_ps(m, cr + j));
      __m512 dct = _mm512_mul_ps(_mm512_mul_ps(dhv, o), _mm512_fnmadd_ps(tc, tc, one));
      if (dcr) dct = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dcr + j), dct);
      const __m512 di = _mm512_mul_ps(_mm512_mul_ps(dct, g), _mm512_mul_ps(i, _mm512_sub_ps(one, i)));
      const __m512 df = _mm512_mul_ps(_mm512_mul_ps(dct, _mm512_maskz_loadu_ps(m, cp + j)),
                                      _mm512_mul_ps(f, _mm512_sub_ps(one, f)));
      const __m512 dg = _mm512_mul_ps(_mm512_mul_ps(dct, i), _mm512_fnmadd_ps(g, g, one));
      const __m512 dov = _mm512_mul_ps(_mm512_mul_ps(dhv, tc), _mm512_mul_ps(o, _mm512_sub_ps(one, o)));
      _mm512_mask_storeu_ps(dr + j, m, di);
      _mm512_mask_storeu_ps(dr + H + j, m, df);
      _mm512_mask_storeu_ps(dr + 2 * H + j, m, dg);
      _mm512_mask_storeu_ps(dr + 3 * H + j, m, dov);
      _mm512_mask_storeu_ps(dcp + j, m, _mm512_mul_ps(dct, f));
    }
  }
}

/* ---- dispatch ------------------------------------------------------------- */

void hps_lstm_fwd(hps_isa isa, int64_t batch, int64_t hidden, const float *z, const float *bias,
                  const float *c_prev, float *gates, float *c, float *h) {
  if (batch <= 0 || hidden <= 0) return;
  switch (isa) {
    case HPS_ISA_AVX512:
      fwd_avx512(batch, hidden, z, bias, c_prev, gates, c, h);
      break;
    case HPS_ISA_AVX2:
      fwd_avx2(batch, hidden, z, bias, c_prev, gates, c, h);
      break;
    default:
      fwd_scalar(batch, hidden, z, bias, c_prev, gates, c, h);
  }
}

void hps_lstm_bwd(hps_isa isa, int64_t batch, int64_t hidden, const float *gates,
                  const float *c_prev, const float *c, const float *dh, const float *dc,
                  float *dz, float *dc_prev) {
  if (batch <= 0 || hidden <= 0) return;
  switch (isa) {
    case HPS_ISA_AVX512:
      bwd_avx512(batch, hidden, gates, c_prev, c, dh, dc, dz, dc_prev);
      break;
    case HPS_ISA_AVX2:
      bwd_avx2(batch, hidden, gates, c_prev, c, dh, dc, dz, dc_prev);
      break;
    default:
      bwd_scalar(batch, hidden, gates, c_prev, c, dh, dc, dz, dc_prev);
  }
}
