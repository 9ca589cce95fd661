/* Row softmax / log-softmax, binary cross-entropy with logits and softmax
 * cross-entropy (heterps_kernels.h section 7): the scalar reference and its
 * AVX2 and AVX-512 twins. Every row is shifted by its maximum before exp, so
 * nothing overflows; a NaN anywhere in a row makes the whole row NaN. */
#include "heterps_kernels.h"
#include "vmath.h"

/* ---- scalar reference ------------------------------------------------- */

static float row_max_scalar(int64_t n, const float *x) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

/* sum_i exp(x[i] - m); stores the terms in e when e is not NULL. */
static double row_expsum_scalar(int64_t n, const float *x, float m, float *e) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    const float v = expf(x[i] - m);
    s += v;
    if (e) e[i] = v;
  }
  return s;
}

static void softmax_scalar(int64_t rows, int64_t cols, const float *x, float *y, int log) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    const float m = row_max_scalar(cols, xr);
    if (log) {
      const float ls = logf((float)row_expsum_scalar(cols, xr, m, NULL));
      for (int64_t i = 0; i < cols; i++) yr[i] = (xr[i] - m) - ls;
    } else {
      const float inv = 1.0f / (float)row_expsum_scalar(cols, xr, m, yr);
      for (int64_t i = 0; i < cols; i++) yr[i] *= inv;
    }
  }
}

static double bce_fwd_scalar(int64_t n, const float *x, const float *y) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += hps_bce_termf(x[i], y[i]);
  return s;
}

static void bce_bwd_scalar(int64_t n, const float *x, const float *y, float scale, float *dx) {
  for (int64_t i = 0; i < n; i++) dx[i] = scale * hps_bce_gradf(x[i], y[i]);
}

static double xent_scalar(int64_t rows, int64_t cols, const float *x, const int64_t *labels,
                          float scale, float *dx) {
  double loss = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    const int64_t label = labels[r];
    const float m = row_max_scalar(cols, xr);
    const float s = (float)row_expsum_scalar(cols, xr, m, NULL);
    loss += (double)logf(s) - (double)(xr[label] - m);
    if (!dx) continue;
    const float inv = 1.0f / s;
    float *dr = dx + r * cols;
    for (int64_t i = 0; i < cols; i++) {
      dr[i] = scale * (expf(xr[i] - m) * inv - (i == label ? 1.0f : 0.0f));
    }
  }
  return loss;
}

/* ---- AVX2 ----------------------------------------------------------------- */

HPS_AVX2 static float row_max_avx2(int64_t n, const float *x) {
  const int64_t body = n & ~(int64_t)7;
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 m = ninf;
  for (int64_t i = 0; i < body; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  if (body < n) {
    const __m256i tail = hps_v8_tailmask(n - body);
    const __m256 v = _mm256_maskload_ps(x + body, tail);
    m = _mm256_max_ps(m, _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(tail)));
  }
  return hps_v8_hmax(m);
}

HPS_AVX2 static float row_expsum_avx2(int64_t n, const float *x, float m, float *e) {
  const int64_t body = n & ~(int64_t)7;
  const __m256 vm = _mm256_set1_ps(m);
  __m256 s = _mm256_setzero_ps();
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 v = hps_v8_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    s = _mm256_add_ps(s, v);
    if (e) _mm256_storeu_ps(e + i, v);
  }
  if (body < n) {
    const __m256i tail = hps_v8_tailmask(n - body);
    __m256 v = hps_v8_exp(_mm256_sub_ps(_mm256_maskload_ps(x + body, tail), vm));
    v = _mm256_and_ps(v, _mm256_castsi256_ps(tail));
    s = _mm256_add_ps(s, v);
    if (e) _mm256_maskstore_ps(e + body, tail, v);
  }
  return hps_v8_hsum(s);
}

/* y[i] = (x[i] - m) - ls */
HPS_AVX2 static void row_shift_avx2(int64_t n, const float *x, float m, float ls, float *y) {
  const int64_t body = n & ~(int64_t)7;
  const __m256 vm = _mm256_set1_ps(m), vl = _mm256_set1_ps(ls);
  for (int64_t i = 0; i < body; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vl));
  }
  if (body < n) {
    const __m256i tail = hps_v8_tailmask(n - body);
    const __m256 v = _mm256_sub_ps(_mm256_sub_ps(_mm256_maskload_ps(x + body, tail), vm), vl);
    _mm256_maskstore_ps(y + body, tail, v);
  }
}

HPS_AVX2 static void row_scale_avx2(int64_t n, float s, float *y) {
  const int64_t body = n & ~(int64_t)7;
  const __m256 vs = _mm256_set1_ps(s);
  for (int64_t i = 0; i < body; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vs));
  if (body < n) {
    const __m256i tail = hps_v8_tailmask(n - body);
    _mm256_maskstore_ps(y + body, tail, _mm256_mul_ps(_mm256_maskload_ps(y + body, tail), vs));
  }
}

HPS_AVX2 static void softmax_avx2(int64_t rows, int64_t cols, const float *x, float *y, int log) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    const float m = row_max_avx2(cols, xr);
    if (log) {
      row_shift_avx2(cols, xr, m, logf(row_expsum_avx2(cols, xr, m, NULL)), yr);
    } else {
      row_scale_avx2(cols, 1.0f / row_expsum_avx2(cols, xr, m, yr), yr);
    }
  }
}

HPS_AVX2 static double bce_fwd_avx2(int64_t n, const float *x, const float *y) {
  const int64_t body = n & ~(int64_t)7;
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 t = hps_v8_bce_term(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
  }
  if (body < n) {
    const __m256i tail = hps_v8_tailmask(n - body);
    __m256 t = hps_v8_bce_term(_mm256_maskload_ps(x + body, tail), _mm256_maskload_ps(y + body, tail));
    t = _mm256_and_ps(t, _mm256_castsi256_ps(tail));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
  }
  return hps_v4d_hsum(_mm256_add_pd(s0, s1));
}

HPS_AVX2 static inline __m256 bce_grad_v8(__m256 x, __m256 y, __m256 scale) {
  return _mm256_mul_ps(scale, hps_v8_bce_grad(x, y));
}

HPS_AVX2 static void bce_bwd_avx2(int64_t n, const float *x, const float *y, float scale,
                                  float *dx) {
  const int64_t body = n & ~(int64_t)7;
  const __m256 vs = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < body; i += 8) {
    _mm256_storeu_ps(dx + i, bce_grad_v8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), vs));
  }
  if (body < n) {
    const __m256i tail = hps_v8_tailmask(n - body);
    const __m256 g = bce_grad_v8(_mm256_maskload_ps(x + body, tail),
                                 _mm256_maskload_ps(y + body, tail), vs);
    _mm256_maskstore_ps(dx + body, tail, g);
  }
}

/* dx[i] = scale * (exp(x[i]-m) * inv - (i == label)) over one row. */
HPS_AVX2 static void xent_grad_row_avx2(int64_t n, const float *x, float m, float inv,
                                        int64_t label, float scale, float *dx) {
  const __m256 vm = _mm256_set1_ps(m), vinv = _mm256_set1_ps(inv), vs = _mm256_set1_ps(scale);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i tail = hps_v8_tailmask(n - i < 8 ? n - i : 8);
    const __m256 v = _mm256_maskload_ps(x + i, tail);
    __m256 p = _mm256_mul_ps(hps_v8_exp(_mm256_sub_ps(v, vm)), vinv);
    if (label >= i && label < i + 8) {
      const __m256i hit = _mm256_cmpeq_epi32(lanes, _mm256_set1_epi32((int)(label - i)));
      p = _mm256_sub_ps(p, _mm256_and_ps(one, _mm256_castsi256_ps(hit)));
    }
    _mm256_maskstore_ps(dx + i, tail, _mm256_mul_ps(vs, p));
  }
}

HPS_AVX2 static double xent_avx2(int64_t rows, int64_t cols, const float *x, const int64_t *labels,
                                 float scale, float *dx) {
  double loss = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    const float m = row_max_avx2(cols, xr);
    const float s = row_expsum_avx2(cols, xr, m, NULL);
    loss += (double)logf(s) - (double)(xr[labels[r]] - m);
    if (dx) xent_grad_row_avx2(cols, xr, m, 1.0f / s, labels[r], scale, dx + r * cols);
  }
  return loss;
}

/* ---- AVX-512 -------------------------------------------------------------- */

HPS_AVX512 static float row_max_avx512(int64_t n, const float *x) {
  const int64_t body = n & ~(int64_t)15;
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 m = ninf;
  for (int64_t i = 0; i < body; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  if (body < n) {
    m = _mm512_max_ps(m, _mm512_mask_loadu_ps(ninf, hps_v16_tailmask(n - body), x + body));
  }
  return _mm512_reduce_max_ps(m);
}

HPS_AVX512 static float row_expsum_avx512(int64_t n, const float *x, float m, float *e) {
  const int64_t body = n & ~(int64_t)15;
  const __m512 vm = _mm512_set1_ps(m);
  __m512 s = _mm512_setzero_ps();
  for (int64_t i = 0; i < body; i += 16) {
    const __m512 v = hps_v16_exp(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    s = _mm512_add_ps(s, v);
    if (e) _mm512_storeu_ps(e + i, v);
  }
  if (body < n) {
    const __mmask16 tail = hps_v16_tailmask(n - body);
    const __m512 v = hps_v16_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + body), vm));
    s = _mm512_mask_add_ps(s, tail, s, v);
    if (e) _mm512_mask_storeu_ps(e + body, tail, v);
  }
  return _mm512_reduce_add_ps(s);
}

HPS_AVX512 static void row_shift_avx512(int64_t n, const float *x, float m, float ls, float *y) {
  const int64_t body = n & ~(int64_t)15;
  const __m512 vm = _mm512_set1_ps(m), vl = _mm512_set1_ps(ls);
  for (int64_t i = 0; i < body; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), vl));
  }
  if (body < n) {
    const __mmask16 tail = hps_v16_tailmask(n - body);
    const __m512 v = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + body), vm), vl);
    _mm512_mask_storeu_ps(y + body, tail, v);
  }
}

HPS_AVX512 static void row_scale_avx512(int64_t n, float s, float *y) {
  const int64_t body = n & ~(int64_t)15;
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < body; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), vs));
  if (body < n) {
    const __mmask16 tail = hps_v16_tailmask(n - body);
    _mm512_mask_storeu_ps(y + body, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + body), vs));
  }
}

HPS_AVX512 static void softmax_avx512(int64_t rows, int64_t cols, const float *x, float *y, int log) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    const float m = row_max_avx512(cols, xr);
    if (log) {
      row_shift_avx512(cols, xr, m, logf(row_expsum_avx512(cols, xr, m, NULL)), yr);
    } else {
      row_scale_avx512(cols, 1.0f / row_expsum_avx512(cols, xr, m, yr), yr);
    }
  }
}

HPS_AVX512 static inline __m512d bce_add16(__m512d s, __m512 t) {
  s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_castps512_ps256(t)));
  return _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_extractf32x8_ps(t, 1)));
}

HPS_AVX512 static double bce_fwd_avx512(int64_t n, const float *x, const float *y) {
  const int64_t body = n & ~(int64_t)15;
  __m512d s = _mm512_setzero_pd();
  for (int64_t i = 0; i < body; i += 16) {
    s = bce_add16(s, hps_v16_bce_term(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  if (body < n) {
    const __mmask16 tail = hps_v16_tailmask(n - body);
    const __m512 t = hps_v16_bce_term(_mm512_maskz_loadu_ps(tail, x + body),
                                      _mm512_maskz_loadu_ps(tail, y + body));
    s = bce_add16(s, _mm512_maskz_mov_ps(tail, t));
  }
  return _mm512_reduce_add_pd(s);
}

HPS_AVX512 static inline __m512 bce_grad_v16(__m512 x, __m512 y, __m512 scale) {
  return _mm512_mul_ps(scale, hps_v16_bce_grad(x, y));
}

HPS_AVX512 static void bce_bwd_avx512(int64_t n, const float *x, const float *y, float scale,
                                      float *dx) {
  const int64_t body = n & ~(int64_t)15;
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < body; i += 16) {
    _mm512_storeu_ps(dx + i, bce_grad_v16(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), vs));
  }
  if (body < n) {
    const __mmask16 tail = hps_v16_tailmask(n - body);
    const __m512 g = bce_grad_v16(_mm512_maskz_loadu_ps(tail, x + body),
                                  _mm512_maskz_loadu_ps(tail, y + body), vs);
    _mm512_mask_storeu_ps(dx + body, tail, g);
  }
}

HPS_AVX512 static void xent_grad_row_avx512(int64_t n, const float *x, float m, float inv,
                                            int64_t label, float scale, float *dx) {
  const __m512 vm = _mm512_set1_ps(m), vinv = _mm512_set1_ps(inv), vs = _mm512_set1_ps(scale);
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 tail = hps_v16_tailmask(n - i < 16 ? n - i : 16);
    const __m512 v = _mm512_maskz_loadu_ps(tail, x + i);
    __m512 p = _mm512_mul_ps(hps_v16_exp(_mm512_sub_ps(v, vm)), vinv);
    if (label >= i && label < i + 16) {
      p = _mm512_mask_sub_ps(p, (__mmask16)(1u << (unsigned)(label - i)), p, one);
    }
    _mm512_mask_storeu_ps(dx + i, tail, _mm512_mul_ps(vs, p));
  }
}

HPS_AVX512 static double xent_avx512(int64_t rows, int64_t cols, const float *x,
                                     const int64_t *labels, float scale, float *dx) {
  double loss = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    const float m = row_max_avx512(cols, xr);
    const float s = row_expsum_avx512(cols, xr, m, NULL);
    loss += (double)logf(s) - (double)(xr[labels[r]] - m);
    if (dx) xent_grad_row_avx512(cols, xr, m, 1.0f / s, labels[r], scale, dx + r * cols);
  }
  return loss;
}

/* ---- dispatch ------------------------------------------------------------- */

void hps_softmax_rows(hps_isa isa, int64_t rows, int64_t cols, const float *x, float *y, int log) {
  if (rows <= 0 || cols <= 0) return;
  switch (isa) {
    case HPS_ISA_AVX512:
      softmax_avx512(rows, cols, x, y, log);
      break;
    case HPS_ISA_AVX2:
      softmax_avx2(rows, cols, x, y, log);
      break;
    default:
      softmax_scalar(rows, cols, x, y, log);
  }
}

double hps_bce_logits_fwd(hps_isa isa, int64_t n, const float *logits, const float *labels) {
  if (n <= 0) return 0;
  switch (isa) {
    case HPS_ISA_AVX512:
      return bce_fwd_avx512(n, logits, labels);
    case HPS_ISA_AVX2:
      return bce_fwd_avx2(n, logits, labels);
    default:
      return bce_fwd_scalar(n, logits, labels);
  }
}

void hps_bce_logits_bwd(hps_isa isa, int64_t n, const float *logits, const float *labels,
                        float scale, float *dx) {
  if (n <= 0) return;
  switch (isa) {
    case HPS_ISA_AVX512:
      bce_bwd_avx512(n, logits, labels, scale, dx);
      break;
    case HPS_ISA_AVX2:
      bce_bwd_avx2(n, logits, labels, scale, dx);
      break;
    default:
      bce_bwd_scalar(n, logits, labels, scale, dx);
  }
}

int hps_softmax_xent(hps_isa isa, int64_t rows, int64_t cols, const float *logits,
                     const int64_t *labels, float scale, float *dx, double *loss,
                     int64_t *bad) {
  if (rows < 0 || cols < 0 || loss == NULL) return HPS_EINVAL;
  for (int64_t r = 0; r < rows; r++) {
    if (labels[r] < 0 || labels[r] >= cols) {
      if (bad) *bad = r;
      return HPS_ERANGE;
    }
  }
  switch (isa) {
    case HPS_ISA_AVX512:
      *loss = xent_avx512(rows, cols, logits, labels, scale, dx);
      break;
    case HPS_ISA_AVX2:
      *loss = xent_avx2(rows, cols, logits, labels, scale, dx);
      break;
    default:
      *loss = xent_scalar(rows, cols, logits, labels, scale, dx);
  }
  return HPS_OK;
}
