/* Fused bias + activation, forward and backward (heterps_kernels.h section 2):
 * the scalar reference and its AVX2 and AVX-512 twins. Vector tails use
 * masked loads and stores, which never touch lanes past the end. */
#include "heterps_kernels.h"
#include "pool.h"
#include "vmath.h"

/* ---- scalar reference ------------------------------------------------- */

static inline float act_scalar(hps_act act, float v) {
  switch (act) {
    case HPS_ACT_RELU:
      return v < 0.0f ? 0.0f : v; /* NaN propagates */
    case HPS_ACT_SIGMOID:
      return hps_sigmoidf(v);
    case HPS_ACT_TANH:
      return tanhf(v);
    default:
      return v;
  }
}

/* dy * act'(x), written in terms of the output y = act(x). */
static inline float dact_scalar(hps_act act, float y, float dy) {
  switch (act) {
    case HPS_ACT_RELU:
      return y > 0.0f ? dy : 0.0f;
    case HPS_ACT_SIGMOID:
      return dy * (y * (1.0f - y));
    case HPS_ACT_TANH:
      return dy * (1.0f - y * y);
    default:
      return dy;
  }
}

static void fwd_scalar(hps_act act, int64_t rows, int64_t cols, const float *x,
                       const float *bias, float *y) {
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      float v = x[r * cols + c];
      if (bias) v += bias[c];
      y[r * cols + c] = act_scalar(act, v);
    }
  }
}

static void bwd_scalar(hps_act act, int64_t rows, int64_t cols, const float *y,
                       const float *dy, float *dx, float *dbias) {
  if (dbias) {
    for (int64_t c = 0; c < cols; c++) dbias[c] = 0.0f;
  }
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      const float g = dact_scalar(act, y[r * cols + c], dy[r * cols + c]);
      dx[r * cols + c] = g;
      if (dbias) dbias[c] += g;
    }
  }
}

/* ---- AVX2 ----------------------------------------------------------------- */

HPS_AVX2 static inline __m256 act_v8(hps_act act, __m256 v) {
  switch (act) {
    case HPS_ACT_RELU:
      return _mm256_max_ps(_mm256_setzero_ps(), v); /* NaN in v is returned */
    case HPS_ACT_SIGMOID:
      return hps_v8_sigmoid(v);
    case HPS_ACT_TANH:
      return hps_v8_tanh(v);
    default:
      return v;
  }
}

HPS_AVX2 static inline __m256 dact_v8(hps_act act, __m256 y, __m256 dy) {
  const __m256 one = _mm256_set1_ps(1.0f);
  switch (act) {
    case HPS_ACT_RELU:
      return _mm256_and_ps(dy, _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GT_OQ));
    case HPS_ACT_SIGMOID:
      return _mm256_mul_ps(dy, _mm256_mul_ps(y, _mm256_sub_ps(one, y)));
    case HPS_ACT_TANH:
      return _mm256_mul_ps(dy, _mm256_fnmadd_ps(y, y, one));
    default:
      return dy;
  }
}

HPS_AVX2 static void fwd_avx2(hps_act act, int64_t rows, int64_t cols, const float *x,
                              const float *bias, float *y) {
  const int64_t body = cols & ~(int64_t)7;
  const __m256i tail = hps_v8_tailmask(cols - body);
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    for (int64_t c = 0; c < body; c += 8) {
      __m256 v = _mm256_loadu_ps(xr + c);
      if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + c));
      _mm256_storeu_ps(yr + c, act_v8(act, v));
    }
    if (body < cols) {
      __m256 v = _mm256_maskload_ps(xr + body, tail);
      if (bias) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + body, tail));
      _mm256_maskstore_ps(yr + body, tail, act_v8(act, v));
    }
  }
}

HPS_AVX2 static void bwd_avx2(hps_act act, int64_t rows, int64_t cols, const float *y,
                              const float *dy, float *dx, float *dbias) {
  const int64_t body = cols & ~(int64_t)7;
  const __m256i tail = hps_v8_tailmask(cols - body);
  if (dbias) {
    for (int64_t c = 0; c < cols; c++) dbias[c] = 0.0f;
  }
  for (int64_t r = 0; r < rows; r++) {
    const float *yr = y + r * cols, *dyr = dy + r * cols;
    float *dxr = dx + r * cols;
    for (int64_t c = 0; c < body; c += 8) {
      const __m256 g = dact_v8(act, _mm256_loadu_ps(yr + c), _mm256_loadu_ps(dyr + c));
      _mm256_storeu_ps(dxr + c, g);
      if (dbias) _mm256_storeu_ps(dbias + c, _mm256_add_ps(_mm256_loadu_ps(dbias + c), g));
    }
    if (body < cols) {
      const __m256 g = dact_v8(act, _mm256_maskload_ps(yr + body, tail),
                               _mm256_maskload_ps(dyr + body, tail));
      _mm256_maskstore_ps(dxr + body, tail, g);
      if (dbias) {
        const __m256 s = _mm256_add_ps(_mm256_maskload_ps(dbias + body, tail), g);
        _mm256_maskstore_ps(dbias + body, tail, s);
      }
    }
  }
}

/* ---- AVX-512 -------------------------------------------------------------- */

HPS_AVX512 static inline __m512 act_v16(hps_act act, __m512 v) {
  switch (act) {
    case HPS_ACT_RELU:
      return _mm512_max_ps(_mm512_setzero_ps(), v);
    case HPS_ACT_SIGMOID:
      return hps_v16_sigmoid(v);
    case HPS_ACT_TANH:
      return hps_v16_tanh(v);
    default:
      return v;
  }
}

HPS_AVX512 static inline __m512 dact_v16(hps_act act, __m512 y, __m512 dy) {
  const __m512 one = _mm512_set1_ps(1.0f);
  switch (act) {
    case HPS_ACT_RELU:
      return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ), dy);
    case HPS_ACT_SIGMOID:
      return _mm512_mul_ps(dy, _mm512_mul_ps(y, _mm512_sub_ps(one, y)));
    case HPS_ACT_TANH:
      return _mm512_mul_ps(dy, _mm512_fnmadd_ps(y, y, one));
    default:
      return dy;
  }
}

HPS_AVX512 static void fwd_avx512(hps_act act, int64_t rows, int64_t cols, const float *x,
                                  const float *bias, float *y) {
  const int64_t body = cols & ~(int64_t)15;
  const __mmask16 tail = hps_v16_tailmask(cols - body);
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    for (int64_t c = 0; c < body; c += 16) {
      __m512 v = _mm512_loadu_ps(xr + c);
      if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + c));
      _mm512_storeu_ps(yr + c, act_v16(act, v));
    }
    if (tail) {
      __m512 v = _mm512_maskz_loadu_ps(tail, xr + body);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(tail, bias + body));
      _mm512_mask_storeu_ps(yr + body, tail, act_v16(act, v));
    }
  }
}

HPS_AVX512 static void bwd_avx512(hps_act act, int64_t rows, int64_t cols, const float *y,
                                  const float *dy, float *dx, float *dbias) {
  const int64_t body = cols & ~(int64_t)15;
  const __mmask16 tail = hps_v16_tailmask(cols - body);
  if (dbias) {
    for (int64_t c = 0; c < cols; c++) dbias[c] = 0.0f;
  }
  for (int64_t r = 0; r < rows; r++) {
    const float *yr = y + r * cols, *dyr = dy + r * cols;
    float *dxr = dx + r * cols;
    for (int64_t c = 0; c < body; c += 16) {
      const __m512 g = dact_v16(act, _mm512_loadu_ps(yr + c), _mm512_loadu_ps(dyr + c));
      _mm512_storeu_ps(dxr + c, g);
      if (dbias) _mm512_storeu_ps(dbias + c, _mm512_add_ps(_mm512_loadu_ps(dbias + c), g));
    }
    if (tail) {
      const __m512 g = dact_v16(act, _mm512_maskz_loadu_ps(tail, yr + body),
                                _mm512_maskz_loadu_ps(tail, dyr + body));
      _mm512_mask_storeu_ps(dxr + body, tail, g);
      if (dbias) {
        const __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(tail, dbias + body), g);
        _mm512_mask_storeu_ps(dbias + body, tail, s);
      }
    }
  }
}

/* ---- dispatch ------------------------------------------------------------- */

static int act_ok(hps_act act) { return act >= HPS_ACT_IDENTITY && act <= HPS_ACT_TANH; }

void hps_bias_act_fwd(hps_isa isa, hps_act act, int64_t rows, int64_t cols, const float *x,
                      const float *bias, float *y) {
  if (rows <= 0 || cols <= 0 || !act_ok(act)) return;
  switch (isa) {
    case HPS_ISA_AVX512:
      fwd_avx512(act, rows, cols, x, bias, y);
      break;
    case HPS_ISA_AVX2:
      fwd_avx2(act, rows, cols, x, bias, y);
      break;
    default:
      fwd_scalar(act, rows, cols, x, bias, y);
  }
}

void hps_bias_act_bwd(hps_isa isa, hps_act act, int64_t rows, int64_t cols, const float *y,
                      const float *dy, float *dx, float *dbias) {
  if (rows < 0 || cols <= 0 || !act_ok(act)) return;
  switch (isa) {
    case HPS_ISA_AVX512:
      bwd_avx512(act, rows, cols, y, dy, dx, dbias);
      break;
    case HPS_ISA_AVX2:
      bwd_avx2(act, rows, cols, y, dy, dx, dbias);
      break;
    default:
      bwd_scalar(act, rows, cols, y, dy, dx, dbias);
  }
}

/* ---- split over the pool -------------------------------------------------- */

typedef struct {
  hps_isa isa;
  hps_act act;
  int64_t rows, cols, grain;
  const float *x, *bias, *y, *dy;
  float *out, *partials;
} bias_act_split;

static void fwd_piece(void *ctx, int64_t piece) {
  bias_act_split *s = ctx;
  int64_t lo, hi;
  piece_bounds(piece, s->grain, s->rows, &lo, &hi);
  hps_bias_act_fwd(s->isa, s->act, hi - lo, s->cols, s->x + lo * s->cols, s->bias, s->out + lo * s->cols);
}

static void bwd_piece(void *ctx, int64_t piece) {
  bias_act_split *s = ctx;
  int64_t lo, hi;
  piece_bounds(piece, s->grain, s->rows, &lo, &hi);
  hps_bias_act_bwd(s->isa, s->act, hi - lo, s->cols, s->y + lo * s->cols, s->dy + lo * s->cols,
                   s->out + lo * s->cols, s->partials ? s->partials + piece * s->cols : NULL);
}

void hps_bias_act_fwd_split(hps_isa isa, hps_act act, int64_t rows, int64_t cols, const float *x,
                            const float *bias, float *y, int64_t grain, int threads) {
  if (rows <= 0 || cols <= 0 || grain < 1 || !act_ok(act)) return;
  bias_act_split s = {isa, act, rows, cols, grain, x, bias, NULL, NULL, y, NULL};
  hps_parallel(piece_count(rows, grain), threads, fwd_piece, &s);
}

void hps_bias_act_bwd_split(hps_isa isa, hps_act act, int64_t rows, int64_t cols, const float *y,
                            const float *dy, float *dx, float *partials, int64_t grain,
                            int threads) {
  if (rows <= 0 || cols <= 0 || grain < 1 || !act_ok(act)) return;
  bias_act_split s = {isa, act, rows, cols, grain, NULL, NULL, y, dy, dx, partials};
  hps_parallel(piece_count(rows, grain), threads, bwd_piece, &s);
}
