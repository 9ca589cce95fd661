/*
 * vmath.h — elementwise math shared by the pointwise kernels (act.c,
 * softmax.c, lstm.c): scalar references built on libm, and 8-lane (AVX2+FMA)
 * and 16-lane (AVX-512) versions of exp, log, log1p, sigmoid and tanh.
 *
 * Every vector function carries the target attribute of its ISA, so it can
 * only be inlined into (and must only be called from) functions compiled for
 * the same ISA; the translation unit itself is built for baseline x86-64.
 *
 * Accuracy and ranges (checked against float64 by the tests in native/):
 *   exp     Cephes expf: range reduction by ln2 (two-constant split, FMA),
 *           degree-6 polynomial, scaling by 2^n in two steps (AVX2) or with
 *           vscalefps (AVX-512), so results down to the smallest subnormal
 *           are rounded once. Relative error <= 2e-6 over [-87, 88]; x <= -105
 *           gives 0, x >= 89 gives +Inf, NaN gives NaN. The kernels only call
 *           it with arguments <= 0.
 *   log     Cephes logf for positive normal x (NaN propagates).
 *   log1p   log(1+u) * u / ((1+u)-1) (Goldberg), exact for tiny u.
 *   sigmoid e/(1+e) or 1/(1+e) with e = exp(-|x|): never overflows.
 *   tanh    odd polynomial for |x| < 0.625, (1-e)/(1+e) with e = exp(-2|x|)
 *           above: never overflows, keeps relative accuracy near 0.
 */
#ifndef HETERPS_VMATH_H
#define HETERPS_VMATH_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define HPS_AVX2 __attribute__((target("avx2,fma")))
#define HPS_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

/* Clamp range of exp's argument: below -105 the result rounds to 0, above 89
 * it is +Inf; clamping keeps the scale exponent inside int range. */
#define HPS_EXP_LO (-105.0f)
#define HPS_EXP_HI 89.0f
#define HPS_LOG2E 1.44269504088896341f
#define HPS_LN2_HI 0.693359375f
#define HPS_LN2_LO (-2.12194440e-4f)
#define HPS_SQRT_HALF 0.707106781186547524f
#define HPS_TANH_POLY_MAX 0.625f

/* ---- scalar references (libm) ---------------------------------------- */

static inline float hps_sigmoidf(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x); /* x < 0 or NaN: NaN propagates through e */
  return e / (1.0f + e);
}

/* max(x,0) - x*y + log1p(exp(-|x|)): one term of BCE with logits. */
static inline float hps_bce_termf(float x, float y) {
  return (x > 0.0f ? x : 0.0f) - x * y + log1pf(expf(-fabsf(x)));
}

/* sigmoid(x) - y, as (1-y) - sigmoid(-x) for x >= 0: a confident correct
 * prediction (x >> 0, y = 1) keeps its tiny gradient instead of rounding
 * sigmoid(x) to 1. */
static inline float hps_bce_gradf(float x, float y) {
  const float e = expf(-fabsf(x));
  const float q = e / (1.0f + e); /* sigmoid(-|x|) */
  return x >= 0.0f ? (1.0f - y) - q : q - y;
}

/* ---- AVX2 + FMA, 8 lanes ---------------------------------------------- */

/* Lanes [0, rem) set, for vmaskmovps (which never touches masked-out lanes). */
HPS_AVX2 static inline __m256i hps_v8_tailmask(int64_t rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rem),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

HPS_AVX2 static inline __m256 hps_v8_abs(__m256 x) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}

HPS_AVX2 static inline __m256 hps_v8_exp(__m256 x) {
  /* max/min return their second operand when one is NaN: NaN stays NaN. */
  x = _mm256_min_ps(_mm256_set1_ps(HPS_EXP_HI), _mm256_max_ps(_mm256_set1_ps(HPS_EXP_LO), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(HPS_LOG2E)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(HPS_LN2_HI), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(HPS_LN2_LO), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  /* 2^n as 2^n1 * 2^n2 with n1 = n>>1: both halves are normal floats for
   * n in [-152, 128], so subnormal results are rounded only once. */
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

HPS_AVX2 static inline __m256 hps_v8_log(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256i xi = _mm256_castps_si256(x);
  __m256 e = _mm256_cvtepi32_ps(
      _mm256_sub_epi32(_mm256_srli_epi32(xi, 23), _mm256_set1_epi32(126)));
  const __m256 m = _mm256_or_ps(
      _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x007fffff))),
      _mm256_set1_ps(0.5f)); /* x = m * 2^e, m in [0.5, 1) */
  const __m256 low = _mm256_cmp_ps(m, _mm256_set1_ps(HPS_SQRT_HALF), _CMP_LT_OQ);
  const __m256 f = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(m, low)), one);
  e = _mm256_sub_ps(e, _mm256_and_ps(one, low));
  const __m256 z = _mm256_mul_ps(f, f);
  __m256 y = _mm256_set1_ps(7.0376836292e-2f);
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(-1.1514610310e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.1676998740e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(-1.2420140846e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.4249322787e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(-1.6668057665e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(2.0000714765e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(-2.4999993993e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(3.3333331174e-1f));
  y = _mm256_mul_ps(_mm256_mul_ps(y, f), z);
  y = _mm256_fmadd_ps(e, _mm256_set1_ps(HPS_LN2_LO), y);
  y = _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), z, y);
  __m256 r = _mm256_add_ps(f, y);
  r = _mm256_fmadd_ps(e, _mm256_set1_ps(HPS_LN2_HI), r);
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* log1p(u) for u > -1. */
HPS_AVX2 static inline __m256 hps_v8_log1p(__m256 u) {
  const __m256 w = _mm256_add_ps(_mm256_set1_ps(1.0f), u);
  const __m256 d = _mm256_sub_ps(w, _mm256_set1_ps(1.0f));
  const __m256 r = _mm256_mul_ps(hps_v8_log(w), _mm256_div_ps(u, d));
  return _mm256_blendv_ps(r, u, _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_EQ_OQ));
}

HPS_AVX2 static inline __m256 hps_v8_sigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = hps_v8_exp(_mm256_or_ps(hps_v8_abs(x), _mm256_set1_ps(-0.0f)));
  const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_div_ps(_mm256_blendv_ps(one, e, neg), _mm256_add_ps(one, e));
}

HPS_AVX2 static inline __m256 hps_v8_tanh(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 a = hps_v8_abs(x);
  const __m256 e = hps_v8_exp(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));
  const __m256 big = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 s = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, s), a, a);
  const __m256 t = _mm256_blendv_ps(big, small,
                                    _mm256_cmp_ps(a, _mm256_set1_ps(HPS_TANH_POLY_MAX), _CMP_LT_OQ));
  return _mm256_or_ps(t, _mm256_and_ps(x, sign));
}

/* One BCE-with-logits term per lane (see hps_bce_termf). */
HPS_AVX2 static inline __m256 hps_v8_bce_term(__m256 x, __m256 y) {
  const __m256 e = hps_v8_exp(_mm256_or_ps(hps_v8_abs(x), _mm256_set1_ps(-0.0f)));
  const __m256 pos = _mm256_max_ps(x, _mm256_setzero_ps());
  return _mm256_add_ps(_mm256_fnmadd_ps(x, y, pos), hps_v8_log1p(e));
}

/* sigmoid(x) - y per lane (see hps_bce_gradf). */
HPS_AVX2 static inline __m256 hps_v8_bce_grad(__m256 x, __m256 y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = hps_v8_exp(_mm256_or_ps(hps_v8_abs(x), _mm256_set1_ps(-0.0f)));
  const __m256 q = _mm256_div_ps(e, _mm256_add_ps(one, e));
  const __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
  return _mm256_blendv_ps(_mm256_sub_ps(q, y), _mm256_sub_ps(_mm256_sub_ps(one, y), q), pos);
}

HPS_AVX2 static inline float hps_v8_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

HPS_AVX2 static inline float hps_v8_hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

HPS_AVX2 static inline double hps_v4d_hsum(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

/* ---- AVX-512, 16 lanes --------------------------------------------------- */

/* Lanes [0, rem) set, rem in [0, 16]; masked-out lanes are never accessed. */
static inline __mmask16 hps_v16_tailmask(int64_t rem) {
  return (__mmask16)((1u << (unsigned)rem) - 1u);
}

HPS_AVX512 static inline __m512 hps_v16_abs(__m512 x) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

HPS_AVX512 static inline __m512 hps_v16_negabs(__m512 x) {
  return _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

HPS_AVX512 static inline __m512 hps_v16_exp(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(HPS_EXP_HI), _mm512_max_ps(_mm512_set1_ps(HPS_EXP_LO), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(HPS_LOG2E)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(HPS_LN2_HI), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(HPS_LN2_LO), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n); /* p * 2^n, rounded once, subnormals included */
}

HPS_AVX512 static inline __m512 hps_v16_log(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512i xi = _mm512_castps_si512(x);
  __m512 e = _mm512_cvtepi32_ps(
      _mm512_sub_epi32(_mm512_srli_epi32(xi, 23), _mm512_set1_epi32(126)));
  const __m512 m = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_and_si512(xi, _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x3f000000)));
  const __mmask16 low = _mm512_cmp_ps_mask(m, _mm512_set1_ps(HPS_SQRT_HALF), _CMP_LT_OQ);
  const __m512 f = _mm512_sub_ps(_mm512_mask_add_ps(m, low, m, m), one);
  e = _mm512_mask_sub_ps(e, low, e, one);
  const __m512 z = _mm512_mul_ps(f, f);
  __m512 y = _mm512_set1_ps(7.0376836292e-2f);
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.1514610310e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.1676998740e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.2420140846e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.4249322787e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.6668057665e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(2.0000714765e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-2.4999993993e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(3.3333331174e-1f));
  y = _mm512_mul_ps(_mm512_mul_ps(y, f), z);
  y = _mm512_fmadd_ps(e, _mm512_set1_ps(HPS_LN2_LO), y);
  y = _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), z, y);
  __m512 r = _mm512_add_ps(f, y);
  r = _mm512_fmadd_ps(e, _mm512_set1_ps(HPS_LN2_HI), r);
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

HPS_AVX512 static inline __m512 hps_v16_log1p(__m512 u) {
  const __m512 w = _mm512_add_ps(_mm512_set1_ps(1.0f), u);
  const __m512 d = _mm512_sub_ps(w, _mm512_set1_ps(1.0f));
  const __m512 r = _mm512_mul_ps(hps_v16_log(w), _mm512_div_ps(u, d));
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_EQ_OQ), u);
}

HPS_AVX512 static inline __m512 hps_v16_sigmoid(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = hps_v16_exp(hps_v16_negabs(x));
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_div_ps(_mm512_mask_mov_ps(one, neg, e), _mm512_add_ps(one, e));
}

HPS_AVX512 static inline __m512 hps_v16_tanh(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 a = hps_v16_abs(x);
  const __m512 e = hps_v16_exp(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
  const __m512 big = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  const __m512 s = _mm512_mul_ps(a, a);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, s), a, a);
  const __m512 t = _mm512_mask_mov_ps(
      big, _mm512_cmp_ps_mask(a, _mm512_set1_ps(HPS_TANH_POLY_MAX), _CMP_LT_OQ), small);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
}

HPS_AVX512 static inline __m512 hps_v16_bce_term(__m512 x, __m512 y) {
  const __m512 e = hps_v16_exp(hps_v16_negabs(x));
  const __m512 pos = _mm512_max_ps(x, _mm512_setzero_ps());
  return _mm512_add_ps(_mm512_fnmadd_ps(x, y, pos), hps_v16_log1p(e));
}

HPS_AVX512 static inline __m512 hps_v16_bce_grad(__m512 x, __m512 y) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = hps_v16_exp(hps_v16_negabs(x));
  const __m512 q = _mm512_div_ps(e, _mm512_add_ps(one, e));
  const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_sub_ps(_mm512_sub_ps(q, y), pos, _mm512_sub_ps(one, y), q);
}

#endif
