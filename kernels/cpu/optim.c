/* Optimiser updates, dense and sparse-row (scalar reference, AVX2, AVX-512).
 * Contracts: heterps_kernels.h, section 5.
 *
 * Each optimiser is one element kernel per ISA over a contiguous run of
 * parameters; the dense op runs it over the whole range, the _rows op once
 * per listed row. The scalar kernels are the reference loops; the vector ones
 * compute the same formulas lane by lane (with FMA where the compiler or the
 * code fuses a multiply and an add, hence tolerances, not equality, between
 * ISAs).
 *
 * Every optimiser op runs with subnormals flushed to zero (x86 FTZ and DAZ,
 * the caller's mode restored on return). A dead ReLU unit's gradient is
 * exactly zero, so Adam's first moment for its weights shrinks by beta1 each
 * step down into the subnormal range, where each x86 operation on it takes a
 * microcode assist of a hundred cycles or more: after 1,000 ctrdnn steps 14 %
 * of the dense first moments were subnormal and dense Adam ran 3-4x slower
 * than on normal numbers. A flushed value is within 2^-126 of IEEE's. The
 * CUDA optimisers are built with -ftz=true to match. */
#include <immintrin.h>
#include <math.h>

#include "heterps_kernels.h"
#include "pool.h"
#include "rows.h"

#define AVX2_FN __attribute__((target("avx2,fma")))
#define AVX512_FN __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#define INLINE static inline __attribute__((always_inline))

/* params holds the hyper-parameters as the kernels use them, derived once per call. */
typedef struct {
  float lr, mom, wd, eps;
  float b1, omb1, b2, omb2; /* beta and 1 - beta */
  float c1, c2;             /* Adam's bias corrections 1/(1-b1^t), 1/(1-b2^t) */
} params;

static params make_params(const hps_opt *o) {
  params p = {o->lr, o->momentum, o->weight_decay, o->eps,
              o->beta1, 1.0f - o->beta1, o->beta2, 1.0f - o->beta2, 1.0f, 1.0f};
  if (o->step >= 1) {
    p.c1 = (float)(1.0 / (1.0 - pow((double)o->beta1, (double)o->step)));
    p.c2 = (float)(1.0 / (1.0 - pow((double)o->beta2, (double)o->step)));
  }
  return p;
}

/* flush_subnormals turns on FTZ and DAZ and returns the mode to restore. */
static unsigned int flush_subnormals(void) {
  const unsigned int mode = _mm_getcsr();
  _mm_setcsr(mode | _MM_FLUSH_ZERO_ON | _MM_DENORMALS_ZERO_ON);
  return mode;
}

/* ---- scalar reference ------------------------------------------------------*/

static void sgd_scalar(int64_t n, float *w, const float *g, float *v, float *unused,
                       const params *p) {
  (void)unused;
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] + p->wd * w[i];
    if (v) {
      v[i] = p->mom * v[i] + gi;
      gi = v[i];
    }
    w[i] -= p->lr * gi;
  }
}

static void adagrad_scalar(int64_t n, float *w, const float *g, float *a, float *unused,
                           const params *p) {
  (void)unused;
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i] + p->wd * w[i];
    a[i] += gi * gi;
    w[i] -= p->lr * gi / (sqrtf(a[i]) + p->eps);
  }
}

static void adam_scalar(int64_t n, float *w, const float *g, float *m, float *v,
                        const params *p) {
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i] + p->wd * w[i];
    m[i] = p->b1 * m[i] + p->omb1 * gi;
    v[i] = p->b2 * v[i] + p->omb2 * gi * gi;
    w[i] -= p->lr * (m[i] * p->c1) / (sqrtf(v[i] * p->c2) + p->eps);
  }
}

/* ---- AVX2 ------------------------------------------------------------------
 * Full vectors in the loop, the last 1..7 elements through maskload/maskstore
 * (slow on AMD, so only there). */

static const int32_t mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

AVX2_FN INLINE __m256 ld8(const float *x, int64_t r, __m256i m) {
  return r >= 8 ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, m);
}

AVX2_FN INLINE void st8(float *x, int64_t r, __m256i m, __m256 v) {
  if (r >= 8)
    _mm256_storeu_ps(x, v);
  else
    _mm256_maskstore_ps(x, m, v);
}

AVX2_FN static void sgd_avx2(int64_t n, float *w, const float *g, float *v, float *unused,
                             const params *p) {
  (void)unused;
  const __m256 lr = _mm256_set1_ps(p->lr), wd = _mm256_set1_ps(p->wd),
               mom = _mm256_set1_ps(p->mom);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t r = n - i;
    const __m256i m = _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - (r < 8 ? r : 8)));
    const __m256 wi = ld8(w + i, r, m);
    __m256 gi = _mm256_fmadd_ps(wd, wi, ld8(g + i, r, m));
    if (v) {
      gi = _mm256_fmadd_ps(mom, ld8(v + i, r, m), gi);
      st8(v + i, r, m, gi);
    }
    st8(w + i, r, m, _mm256_fnmadd_ps(lr, gi, wi));
  }
}

AVX2_FN static void adagrad_avx2(int64_t n, float *w, const float *g, float *a,
                                 float *unused, const params *p) {
  (void)unused;
  const __m256 lr = _mm256_set1_ps(p->lr), wd = _mm256_set1_ps(p->wd),
               eps = _mm256_set1_ps(p->eps);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t r = n - i;
    const __m256i m = _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - (r < 8 ? r : 8)));
    const __m256 wi = ld8(w + i, r, m);
    const __m256 gi = _mm256_fmadd_ps(wd, wi, ld8(g + i, r, m));
    const __m256 ai = _mm256_fmadd_ps(gi, gi, ld8(a + i, r, m));
    st8(a + i, r, m, ai);
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(lr, gi), _mm256_add_ps(_mm256_sqrt_ps(ai), eps));
    st8(w + i, r, m, _mm256_sub_ps(wi, step));
  }
}

AVX2_FN static void adam_avx2(int64_t n, float *w, const float *g, float *mm, float *vv,
                              const params *p) {
  const __m256 lr = _mm256_set1_ps(p->lr), wd = _mm256_set1_ps(p->wd),
               eps = _mm256_set1_ps(p->eps), b1 = _mm256_set1_ps(p->b1),
               omb1 = _mm256_set1_ps(p->omb1), b2 = _mm256_set1_ps(p->b2),
               omb2 = _mm256_set1_ps(p->omb2), c1 = _mm256_set1_ps(p->c1),
               c2 = _mm256_set1_ps(p->c2);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t r = n - i;
    const __m256i m = _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - (r < 8 ? r : 8)));
    const __m256 wi = ld8(w + i, r, m);
    const __m256 gi = _mm256_fmadd_ps(wd, wi, ld8(g + i, r, m));
    const __m256 mi = _mm256_fmadd_ps(b1, ld8(mm + i, r, m), _mm256_mul_ps(omb1, gi));
    const __m256 vi =
        _mm256_fmadd_ps(b2, ld8(vv + i, r, m), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
    st8(mm + i, r, m, mi);
    st8(vv + i, r, m, vi);
    const __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, c2)), eps);
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(lr, _mm256_mul_ps(mi, c1)), den);
    st8(w + i, r, m, _mm256_sub_ps(wi, step));
  }
}

/* ---- AVX-512 ---------------------------------------------------------------
 * One loop; the mask is all ones except on the last iteration. */

AVX512_FN INLINE __mmask16 mask16(int64_t r) {
  return r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1);
}

/* Plain loads and stores for full vectors, masked ones only at the tail:
 * masked stores are slow on some CPUs (AMD Zen 4 among them). */
AVX512_FN INLINE __m512 ld16(const float *x, __mmask16 m) {
  return m == 0xFFFF ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps(m, x);
}

AVX512_FN INLINE void st16(float *x, __mmask16 m, __m512 v) {
  if (m == 0xFFFF)
    _mm512_storeu_ps(x, v);
  else
    _mm512_mask_storeu_ps(x, m, v);
}

AVX512_FN static void sgd_avx512(int64_t n, float *w, const float *g, float *v,
                                 float *unused, const params *p) {
  (void)unused;
  const __m512 lr = _mm512_set1_ps(p->lr), wd = _mm512_set1_ps(p->wd),
               mom = _mm512_set1_ps(p->mom);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512 wi = ld16(w + i, m);
    __m512 gi = _mm512_fmadd_ps(wd, wi, ld16(g + i, m));
    if (v) {
      gi = _mm512_fmadd_ps(mom, ld16(v + i, m), gi);
      st16(v + i, m, gi);
    }
    st16(w + i, m, _mm512_fnmadd_ps(lr, gi, wi));
  }
}

AVX512_FN static void adagrad_avx512(int64_t n, float *w, const float *g, float *a,
                                     float *unused, const params *p) {
  (void)unused;
  const __m512 lr = _mm512_set1_ps(p->lr), wd = _mm512_set1_ps(p->wd),
               eps = _mm512_set1_ps(p->eps);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512 wi = ld16(w + i, m);
    const __m512 gi = _mm512_fmadd_ps(wd, wi, ld16(g + i, m));
    const __m512 ai = _mm512_fmadd_ps(gi, gi, ld16(a + i, m));
    st16(a + i, m, ai);
    const __m512 step = _mm512_div_ps(_mm512_mul_ps(lr, gi), _mm512_add_ps(_mm512_sqrt_ps(ai), eps));
    st16(w + i, m, _mm512_sub_ps(wi, step));
  }
}

AVX512_FN static void adam_avx512(int64_t n, float *w, const float *g, float *mm, float *vv,
                                  const params *p) {
  const __m512 lr = _mm512_set1_ps(p->lr), wd = _mm512_set1_ps(p->wd),
               eps = _mm512_set1_ps(p->eps), b1 = _mm512_set1_ps(p->b1),
               omb1 = _mm512_set1_ps(p->omb1), b2 = _mm512_set1_ps(p->b2),
               omb2 = _mm512_set1_ps(p->omb2), c1 = _mm512_set1_ps(p->c1),
               c2 = _mm512_set1_ps(p->c2);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512 wi = ld16(w + i, m);
    const __m512 gi = _mm512_fmadd_ps(wd, wi, ld16(g + i, m));
    const __m512 mi = _mm512_fmadd_ps(b1, ld16(mm + i, m), _mm512_mul_ps(omb1, gi));
    const __m512 vi = _mm512_fmadd_ps(b2, ld16(vv + i, m),
                                      _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    st16(mm + i, m, mi);
    st16(vv + i, m, vi);
    const __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, c2)), eps);
    const __m512 step = _mm512_div_ps(_mm512_mul_ps(lr, _mm512_mul_ps(mi, c1)), den);
    st16(w + i, m, _mm512_sub_ps(wi, step));
  }
}

/* ---- dispatch ----------------------------------------------------------------
 * Every element kernel has the shape of Adam's, with up to two state arrays
 * (the second unused by SGD and Adagrad), so dense and row ops share one driver. */

typedef void (*kernel)(int64_t n, float *w, const float *g, float *s1, float *s2,
                       const params *p);

typedef struct {
  kernel scalar, avx2, avx512;
} variants;

static const variants sgd_k = {sgd_scalar, sgd_avx2, sgd_avx512};
static const variants adagrad_k = {adagrad_scalar, adagrad_avx2, adagrad_avx512};
static const variants adam_k = {adam_scalar, adam_avx2, adam_avx512};

static kernel pick(hps_isa isa, const variants *v) {
  switch (isa) {
    case HPS_ISA_AVX512: return v->avx512;
    case HPS_ISA_AVX2: return v->avx2;
    default: return v->scalar;
  }
}

static void dense(hps_isa isa, const variants *v, int64_t n, float *w, const float *g, float *s1,
                  float *s2, const hps_opt *o) {
  if (n <= 0 || !w || !g || !o) return;
  const params p = make_params(o);
  const unsigned int mode = flush_subnormals();
  pick(isa, v)(n, w, g, s1, s2, &p);
  _mm_setcsr(mode);
}

/* The listed rows lie anywhere in a table far larger than the caches, so
 * each row's value and state lines are a miss the kernel would wait on in
 * turn; rows_update asks for them ROW_PREFETCH rows ahead instead (rows.h),
 * which the memory system then fetches side by side. */

/* rows_update validates the rows, then runs the kernel on each; nstate is
 * how many of s1, s2 the optimiser needs (SGD's velocity is optional). */
static int rows_update(hps_isa isa, const variants *v, int nstate, int64_t table_rows, int64_t dim,
                       float *w, int64_t nrows, const int64_t *rows, const float *g, float *s1,
                       float *s2, const hps_opt *o, int64_t *bad) {
  if (table_rows < 0 || dim < 0 || nrows < 0 || !o || (nrows > 0 && !rows)) return HPS_EINVAL;
  for (int64_t r = 0; r < nrows; r++) {
    if (rows[r] < 0 || rows[r] >= table_rows) {
      if (bad) *bad = r;
      return HPS_ERANGE;
    }
  }
  if (nrows == 0 || dim == 0) return HPS_OK;
  if (!w || !g || (nstate >= 1 && !s1) || (nstate >= 2 && !s2)) return HPS_EINVAL;
  const params p = make_params(o);
  const kernel k = pick(isa, v);
  const int ahead = hps_row_prefetch_on();
  const unsigned int mode = flush_subnormals();
  for (int64_t r = 0; r < nrows; r++) {
    if (ahead && r + ROW_PREFETCH < nrows) {
      const int64_t at = rows[r + ROW_PREFETCH] * dim;
      prefetch_row_write(w + at, dim);
      if (s1) prefetch_row_write(s1 + at, dim);
      if (s2) prefetch_row_write(s2 + at, dim);
    }
    const int64_t at = rows[r] * dim;
    k(dim, w + at, g + r * dim, s1 ? s1 + at : NULL, s2 ? s2 + at : NULL, &p);
  }
  _mm_setcsr(mode);
  return HPS_OK;
}

void hps_sgd(hps_isa isa, int64_t n, float *w, const float *g, float *v, const hps_opt *o) {
  dense(isa, &sgd_k, n, w, g, v, NULL, o);
}

void hps_adagrad(hps_isa isa, int64_t n, float *w, const float *g, float *a, const hps_opt *o) {
  if (!a) return;
  dense(isa, &adagrad_k, n, w, g, a, NULL, o);
}

void hps_adam(hps_isa isa, int64_t n, float *w, const float *g, float *m, float *v,
              const hps_opt *o) {
  if (!m || !v) return;
  dense(isa, &adam_k, n, w, g, m, v, o);
}

int hps_sgd_rows(hps_isa isa, int64_t table_rows, int64_t dim, float *w, int64_t nrows,
                 const int64_t *rows, const float *g, float *v, const hps_opt *o, int64_t *bad) {
  return rows_update(isa, &sgd_k, 0, table_rows, dim, w, nrows, rows, g, v, NULL, o, bad);
}

int hps_adagrad_rows(hps_isa isa, int64_t table_rows, int64_t dim, float *w, int64_t nrows,
                     const int64_t *rows, const float *g, float *a, const hps_opt *o,
                     int64_t *bad) {
  return rows_update(isa, &adagrad_k, 1, table_rows, dim, w, nrows, rows, g, a, NULL, o, bad);
}

int hps_adam_rows(hps_isa isa, int64_t table_rows, int64_t dim, float *w, int64_t nrows,
                  const int64_t *rows, const float *g, float *m, float *v, const hps_opt *o,
                  int64_t *bad) {
  return rows_update(isa, &adam_k, 2, table_rows, dim, w, nrows, rows, g, m, v, o, bad);
}

/* ---- dense updates split over the pool -------------------------------------- */

typedef struct {
  hps_isa isa;
  int kind;
  int64_t n, grain;
  float *w, *s0, *s1;
  const float *g;
  const hps_opt *o;
} dense_split;

static void dense_piece(void *ctx, int64_t piece) {
  dense_split *s = ctx;
  int64_t lo, hi;
  piece_bounds(piece, s->grain, s->n, &lo, &hi);
  float *s0 = s->s0 ? s->s0 + lo : NULL, *s1 = s->s1 ? s->s1 + lo : NULL;
  switch (s->kind) {
    case HPS_OPT_SGD: hps_sgd(s->isa, hi - lo, s->w + lo, s->g + lo, s0, s->o); break;
    case HPS_OPT_ADAGRAD: hps_adagrad(s->isa, hi - lo, s->w + lo, s->g + lo, s0, s->o); break;
    case HPS_OPT_ADAM: hps_adam(s->isa, hi - lo, s->w + lo, s->g + lo, s0, s1, s->o); break;
  }
}

void hps_update_split(hps_isa isa, int kind, int64_t n, float *w, const float *g, float *s0,
                      float *s1, const hps_opt *o, int64_t grain, int threads) {
  if (n <= 0 || grain < 1) return;
  dense_split s = {isa, kind, n, grain, w, s0, s1, g, o};
  hps_parallel(piece_count(n, grain), threads, dense_piece, &s);
}

/* ---- row updates split over the pool ---------------------------------------- */

typedef struct {
  hps_isa isa;
  int kind;
  int64_t table_rows, dim, nrows, grain;
  float *w, *s0, *s1;
  const int64_t *rows;
  const float *g;
  const hps_opt *o;
  atomic_int rc; /* the first piece's failure */
  int64_t bad;
} rows_split;

static void rows_piece(void *ctx, int64_t piece) {
  rows_split *s = ctx;
  int64_t lo, hi, bad = 0;
  piece_bounds(piece, s->grain, s->nrows, &lo, &hi);
  int64_t n = hi - lo;
  const int64_t *rs = s->rows + lo;
  const float *g = s->g + lo * s->dim;
  int rc;
  switch (s->kind) {
    case HPS_OPT_SGD: rc = hps_sgd_rows(s->isa, s->table_rows, s->dim, s->w, n, rs, g, s->s0, s->o, &bad); break;
    case HPS_OPT_ADAGRAD: rc = hps_adagrad_rows(s->isa, s->table_rows, s->dim, s->w, n, rs, g, s->s0, s->o, &bad); break;
    case HPS_OPT_ADAM: rc = hps_adam_rows(s->isa, s->table_rows, s->dim, s->w, n, rs, g, s->s0, s->s1, s->o, &bad); break;
    default: rc = HPS_EINVAL;
  }
  first_failure(&s->rc, &s->bad, rc, bad + lo);
}

int hps_rows_update_split(hps_isa isa, int kind, int64_t table_rows, int64_t dim, float *w,
                          int64_t nrows, const int64_t *rows, const float *g, float *s0, float *s1,
                          const hps_opt *o, int64_t grain, int threads, int64_t *bad) {
  if (nrows < 0 || grain < 1) return HPS_EINVAL;
  if (nrows == 0) return HPS_OK;
  rows_split s = {isa, kind, table_rows, dim, nrows, grain, w, s0, s1, rows, g, o, HPS_OK, 0};
  hps_parallel(piece_count(nrows, grain), threads, rows_piece, &s);
  return split_status(&s.rc, s.bad, bad);
}
