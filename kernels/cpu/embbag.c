/* Embedding bag forward and backward (scalar reference, AVX2, AVX-512) and
 * the unique-id hash pass (scalar only). Contracts: heterps_kernels.h,
 * section 3.
 *
 * The vector variants keep a block of up to 4 vectors of columns in
 * registers and add the bag's rows into it in id order, so each column sees
 * the same additions in the same order as the scalar reference: the forward
 * is bit-identical across ISAs. */
#include <immintrin.h>
#include <string.h>

#include "heterps_kernels.h"
#include "pool.h"
#include "rows.h"

#define AVX2_FN __attribute__((target("avx2,fma")))
#define AVX512_FN __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#define INLINE static inline __attribute__((always_inline))

static void set_bad(int64_t *bad, int64_t v) {
  if (bad) *bad = v;
}

/* check_offsets validates CSR offsets as described in the header. */
static int check_offsets(int64_t nbags, const int64_t *offsets, int64_t nids, int64_t *bad) {
  if (offsets[0] < 0) {
    set_bad(bad, 0);
    return HPS_EORDER;
  }
  for (int64_t j = 1; j <= nbags; j++) {
    if (offsets[j] < offsets[j - 1] || offsets[j] - offsets[0] > nids) {
      set_bad(bad, j);
      return HPS_EORDER;
    }
  }
  return HPS_OK;
}

/* check_ids validates 0 <= ids[i] < limit for the n ids. */
static int check_ids(int64_t n, const int64_t *ids, int64_t limit, int64_t *bad) {
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= limit) {
      set_bad(bad, i);
      return HPS_ERANGE;
    }
  }
  return HPS_OK;
}

static float bag_scale(hps_pool pool, int64_t len) {
  return (pool == HPS_POOL_MEAN && len > 0) ? 1.0f / (float)len : 1.0f;
}

/* ---- forward ---------------------------------------------------------------*/

static void fwd_scalar(hps_pool pool, int64_t dim, const float *table, int64_t nbags,
                       const int64_t *offsets, const int64_t *ids, float *out) {
  const int64_t base = offsets[0];
  for (int64_t j = 0; j < nbags; j++) {
    const int64_t lo = offsets[j] - base, hi = offsets[j + 1] - base;
    float *o = out + j * dim;
    for (int64_t c = 0; c < dim; c++) o[c] = 0.0f;
    for (int64_t i = lo; i < hi; i++) {
      const float *r = table + ids[i] * dim;
      for (int64_t c = 0; c < dim; c++) o[c] += r[c];
    }
    if (pool == HPS_POOL_MEAN && hi > lo) {
      const float s = bag_scale(pool, hi - lo);
      for (int64_t c = 0; c < dim; c++) o[c] *= s;
    }
  }
}

/* Lanes 0..r-1 of an AVX2 mask for maskload/maskstore: mask_tab + 8 - r. */
static const int32_t mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

AVX2_FN INLINE __m256i mask8(int64_t r) {
  if (r > 8) r = 8;
  if (r < 0) r = 0;
  return _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - r));
}

/* Plain loads and stores for full vectors (full = the block has 8 lanes
 * left), masked ones only at the tail: vmaskmovps stores are microcoded and
 * slow on AMD CPUs. */
AVX2_FN INLINE __m256 ld8(const float *x, __m256i m, int full) {
  return full ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, m);
}

AVX2_FN INLINE void st8(float *x, __m256i m, int full, __m256 v) {
  if (full)
    _mm256_storeu_ps(x, v);
  else
    _mm256_maskstore_ps(x, m, v);
}

/* Bags' rows lie anywhere in a table far larger than the caches: the
 * vector kernels ask for the rows of the ids ROW_PREFETCH ahead of the bag
 * they sum (rows.h), so that their misses overlap instead of coming one
 * after another. */
static inline void prefetch_ahead(const float *table, int64_t dim, const int64_t *ids, int64_t n,
                                  int64_t *next, int64_t upto) {
  if (!hps_row_prefetch_on()) return;
  if (upto > n) upto = n;
  for (; *next < upto; (*next)++) prefetch_row_read(table + ids[*next] * dim, dim);
}

/* fwd_block8 sums columns [c, c+width) of the bag's rows, width <= 8*nv. */
AVX2_FN INLINE void fwd_block8(int nv, const float *table, int64_t dim, const int64_t *ids,
                               int64_t lo, int64_t hi, int64_t c, int64_t width,
                               float scale, float *o) {
  __m256 acc[4];
  __m256i m[4];
  int full[4];
  for (int q = 0; q < nv; q++) {
    m[q] = mask8(width - 8 * q);
    full[q] = width - 8 * q >= 8;
    acc[q] = _mm256_setzero_ps();
  }
  for (int64_t i = lo; i < hi; i++) {
    const float *r = table + ids[i] * dim + c;
    for (int q = 0; q < nv; q++) acc[q] = _mm256_add_ps(acc[q], ld8(r + 8 * q, m[q], full[q]));
  }
  const __m256 s = _mm256_set1_ps(scale);
  for (int q = 0; q < nv; q++) st8(o + c + 8 * q, m[q], full[q], _mm256_mul_ps(acc[q], s));
}

AVX2_FN static void fwd_avx2(hps_pool pool, int64_t dim, const float *table, int64_t nbags,
                             const int64_t *offsets, const int64_t *ids, float *out) {
  const int64_t base = offsets[0], n = offsets[nbags] - base;
  int64_t next = 0;
  for (int64_t j = 0; j < nbags; j++) {
    const int64_t lo = offsets[j] - base, hi = offsets[j + 1] - base;
    prefetch_ahead(table, dim, ids, n, &next, hi + ROW_PREFETCH);
    const float s = bag_scale(pool, hi - lo);
    float *o = out + j * dim;
    for (int64_t c = 0; c < dim; c += 32) {
      const int64_t w = dim - c < 32 ? dim - c : 32;
      switch ((w + 7) / 8) {
        case 1: fwd_block8(1, table, dim, ids, lo, hi, c, w, s, o); break;
        case 2: fwd_block8(2, table, dim, ids, lo, hi, c, w, s, o); break;
        case 3: fwd_block8(3, table, dim, ids, lo, hi, c, w, s, o); break;
        default: fwd_block8(4, table, dim, ids, lo, hi, c, w, s, o); break;
      }
    }
  }
}

AVX512_FN INLINE __mmask16 mask16(int64_t r) {
  if (r >= 16) return (__mmask16)0xFFFF;
  if (r <= 0) return 0;
  return (__mmask16)((1u << r) - 1);
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

/* fwd_block16 sums columns [c, c+width) of the bag's rows, width <= 16*nv. */
AVX512_FN INLINE void fwd_block16(int nv, const float *table, int64_t dim, const int64_t *ids,
                                  int64_t lo, int64_t hi, int64_t c, int64_t width, float scale,
                                  float *o) {
  __m512 acc[4];
  __mmask16 m[4];
  for (int q = 0; q < nv; q++) {
    m[q] = mask16(width - 16 * q);
    acc[q] = _mm512_setzero_ps();
  }
  for (int64_t i = lo; i < hi; i++) {
    const float *r = table + ids[i] * dim + c;
    for (int q = 0; q < nv; q++) acc[q] = _mm512_add_ps(acc[q], ld16(r + 16 * q, m[q]));
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int q = 0; q < nv; q++) st16(o + c + 16 * q, m[q], _mm512_mul_ps(acc[q], s));
}

AVX512_FN static void fwd_avx512(hps_pool pool, int64_t dim, const float *table, int64_t nbags,
                                 const int64_t *offsets, const int64_t *ids, float *out) {
  const int64_t base = offsets[0], n = offsets[nbags] - base;
  int64_t next = 0;
  for (int64_t j = 0; j < nbags; j++) {
    const int64_t lo = offsets[j] - base, hi = offsets[j + 1] - base;
    prefetch_ahead(table, dim, ids, n, &next, hi + ROW_PREFETCH);
    const float s = bag_scale(pool, hi - lo);
    float *o = out + j * dim;
    for (int64_t c = 0; c < dim; c += 64) {
      const int64_t w = dim - c < 64 ? dim - c : 64;
      switch ((w + 15) / 16) {
        case 1: fwd_block16(1, table, dim, ids, lo, hi, c, w, s, o); break;
        case 2: fwd_block16(2, table, dim, ids, lo, hi, c, w, s, o); break;
        case 3: fwd_block16(3, table, dim, ids, lo, hi, c, w, s, o); break;
        default: fwd_block16(4, table, dim, ids, lo, hi, c, w, s, o); break;
      }
    }
  }
}

int hps_embbag_fwd(hps_isa isa, hps_pool pool, int64_t table_rows, int64_t dim,
                   const float *table, int64_t nbags, const int64_t *offsets, int64_t nids,
                   const int64_t *ids, float *out, int64_t *bad) {
  if (table_rows < 0 || dim < 0 || nbags < 0 || nids < 0 || !offsets ||
      (pool != HPS_POOL_SUM && pool != HPS_POOL_MEAN))
    return HPS_EINVAL;
  int rc = check_offsets(nbags, offsets, nids, bad);
  if (rc != HPS_OK) return rc;
  const int64_t n = offsets[nbags] - offsets[0];
  if (n > 0 && !ids) return HPS_EINVAL;
  if ((rc = check_ids(n, ids, table_rows, bad)) != HPS_OK) return rc;
  if (nbags == 0 || dim == 0) return HPS_OK;
  if (!out || (n > 0 && !table)) return HPS_EINVAL;
  switch (isa) {
    case HPS_ISA_AVX512: fwd_avx512(pool, dim, table, nbags, offsets, ids, out); break;
    case HPS_ISA_AVX2: fwd_avx2(pool, dim, table, nbags, offsets, ids, out); break;
    default: fwd_scalar(pool, dim, table, nbags, offsets, ids, out); break;
  }
  return HPS_OK;
}

/* ---- unique ids -------------------------------------------------------------
 * An open-addressing hash table with linear probing in scratch: cap slots of
 * (key, position) pairs, position -1 marking an empty slot, cap a power of
 * two >= 2n. */

static int64_t table_cap(int64_t n) {
  int64_t cap = 2;
  while (cap < 2 * n) cap <<= 1;
  return cap;
}

int64_t hps_unique_scratch_len(int64_t n) {
  if (n < 0 || n > (INT64_MAX >> 3)) return HPS_EINVAL;
  if (n == 0) return 0;
  return 2 * table_cap(n);
}

/* find_or_add returns the position stored for key, or stores pos for it and
 * returns -1 when the key is new. */
static inline int64_t find_or_add(int64_t *slots, uint64_t mask, int64_t key, int64_t pos) {
  uint64_t s = mix64((uint64_t)key) & mask;
  for (;;) {
    int64_t *e = slots + 2 * s;
    if (e[1] < 0) {
      e[0] = key;
      e[1] = pos;
      return -1;
    }
    if (e[0] == key) return e[1];
    s = (s + 1) & mask;
  }
}

/* unique_direct is hps_unique for ids in [lo, lo + span), span at most the
 * scratch's length: each id's position among the distinct ones is kept at
 * scratch[id - lo], with no hashing and only span cells to clear — a pipeline
 * stage's batch, whose ids are rows of its compact local table, is such. */
static int64_t unique_direct(int64_t n, const int64_t *ids, int64_t *uniq, int64_t *index,
                             int64_t *scratch, int64_t lo, uint64_t span) {
  memset(scratch, 0xff, (size_t)span * sizeof(int64_t));
  int64_t count = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t *at = scratch + ((uint64_t)ids[i] - (uint64_t)lo);
    if (*at < 0) {
      *at = count;
      uniq[count++] = ids[i];
    }
    index[i] = *at;
  }
  return count;
}

int64_t hps_unique(int64_t n, const int64_t *ids, int64_t *uniq, int64_t *index,
                   int64_t *scratch) {
  if (n < 0 || n > (INT64_MAX >> 3)) return HPS_EINVAL;
  if (n == 0) return 0;
  if (!ids || !uniq || !index || !scratch) return HPS_EINVAL;
  const int64_t cap = table_cap(n);
  int64_t lo = ids[0], hi = ids[0];
  for (int64_t i = 1; i < n; i++) {
    lo = ids[i] < lo ? ids[i] : lo;
    hi = ids[i] > hi ? ids[i] : hi;
  }
  const uint64_t span = (uint64_t)hi - (uint64_t)lo + 1; /* 0 when every int64 is spanned */
  if (span != 0 && span <= (uint64_t)(2 * cap)) return unique_direct(n, ids, uniq, index, scratch, lo, span);
  memset(scratch, 0xff, (size_t)(2 * cap) * sizeof(int64_t));
  int64_t count = 0;
  for (int64_t i = 0; i < n; i++) {
    const int64_t at = find_or_add(scratch, (uint64_t)cap - 1, ids[i], count);
    if (at < 0) {
      uniq[count] = ids[i];
      index[i] = count++;
    } else {
      index[i] = at;
    }
  }
  return count;
}

int64_t hps_first_duplicate(int64_t n, const int64_t *ids, int64_t *scratch) {
  if (n < 0 || n > (INT64_MAX >> 3)) return HPS_EINVAL;
  if (n == 0) return 0;
  if (!ids || !scratch) return HPS_EINVAL;
  const int64_t cap = table_cap(n);
  memset(scratch, 0xff, (size_t)(2 * cap) * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++)
    if (find_or_add(scratch, (uint64_t)cap - 1, ids[i], i) >= 0) return i;
  return n;
}

/* ---- backward ---------------------------------------------------------------*/

static void bwd_scalar(hps_pool pool, int64_t dim, int64_t nbags,
                       const int64_t *offsets, const int64_t *index, const float *dout,
                       float *grad) {
  const int64_t base = offsets[0];
  for (int64_t j = 0; j < nbags; j++) {
    const int64_t lo = offsets[j] - base, hi = offsets[j + 1] - base;
    const float s = bag_scale(pool, hi - lo);
    const float *d = dout + j * dim;
    for (int64_t i = lo; i < hi; i++) {
      float *g = grad + index[i] * dim;
      for (int64_t c = 0; c < dim; c++) g[c] += s * d[c];
    }
  }
}

/* bwd_block8 adds scale * dout[c..c+width) of one bag into its rows. */
AVX2_FN INLINE void bwd_block8(int nv, int64_t dim, const int64_t *index, int64_t lo, int64_t hi,
                               int64_t c, int64_t width, float scale, const float *d,
                               float *grad) {
  __m256 dv[4];
  __m256i m[4];
  int full[4];
  const __m256 s = _mm256_set1_ps(scale);
  for (int q = 0; q < nv; q++) {
    m[q] = mask8(width - 8 * q);
    full[q] = width - 8 * q >= 8;
    dv[q] = _mm256_mul_ps(s, ld8(d + c + 8 * q, m[q], full[q]));
  }
  for (int64_t i = lo; i < hi; i++) {
    float *g = grad + index[i] * dim + c;
    for (int q = 0; q < nv; q++)
      st8(g + 8 * q, m[q], full[q], _mm256_add_ps(ld8(g + 8 * q, m[q], full[q]), dv[q]));
  }
}

AVX2_FN static void bwd_avx2(hps_pool pool, int64_t dim, int64_t nbags,
                             const int64_t *offsets, const int64_t *index, const float *dout,
                             float *grad) {
  const int64_t base = offsets[0];
  for (int64_t j = 0; j < nbags; j++) {
    const int64_t lo = offsets[j] - base, hi = offsets[j + 1] - base;
    if (lo == hi) continue;
    const float s = bag_scale(pool, hi - lo);
    const float *d = dout + j * dim;
    for (int64_t c = 0; c < dim; c += 32) {
      const int64_t w = dim - c < 32 ? dim - c : 32;
      switch ((w + 7) / 8) {
        case 1: bwd_block8(1, dim, index, lo, hi, c, w, s, d, grad); break;
        case 2: bwd_block8(2, dim, index, lo, hi, c, w, s, d, grad); break;
        case 3: bwd_block8(3, dim, index, lo, hi, c, w, s, d, grad); break;
        default: bwd_block8(4, dim, index, lo, hi, c, w, s, d, grad); break;
      }
    }
  }
}

/* bwd_block16 adds scale * dout[c..c+width) of one bag into its rows. */
AVX512_FN INLINE void bwd_block16(int nv, int64_t dim, const int64_t *index, int64_t lo,
                                  int64_t hi, int64_t c, int64_t width, float scale,
                                  const float *d, float *grad) {
  __m512 dv[4];
  __mmask16 m[4];
  const __m512 s = _mm512_set1_ps(scale);
  for (int q = 0; q < nv; q++) {
    m[q] = mask16(width - 16 * q);
    dv[q] = _mm512_mul_ps(s, ld16(d + c + 16 * q, m[q]));
  }
  for (int64_t i = lo; i < hi; i++) {
    float *g = grad + index[i] * dim + c;
    for (int q = 0; q < nv; q++) st16(g + 16 * q, m[q], _mm512_add_ps(ld16(g + 16 * q, m[q]), dv[q]));
  }
}

AVX512_FN static void bwd_avx512(hps_pool pool, int64_t dim, int64_t nbags,
                                 const int64_t *offsets, const int64_t *index, const float *dout,
                                 float *grad) {
  const int64_t base = offsets[0];
  for (int64_t j = 0; j < nbags; j++) {
    const int64_t lo = offsets[j] - base, hi = offsets[j + 1] - base;
    if (lo == hi) continue;
    const float s = bag_scale(pool, hi - lo);
    const float *d = dout + j * dim;
    for (int64_t c = 0; c < dim; c += 64) {
      const int64_t w = dim - c < 64 ? dim - c : 64;
      switch ((w + 15) / 16) {
        case 1: bwd_block16(1, dim, index, lo, hi, c, w, s, d, grad); break;
        case 2: bwd_block16(2, dim, index, lo, hi, c, w, s, d, grad); break;
        case 3: bwd_block16(3, dim, index, lo, hi, c, w, s, d, grad); break;
        default: bwd_block16(4, dim, index, lo, hi, c, w, s, d, grad); break;
      }
    }
  }
}

int hps_embbag_bwd(hps_isa isa, hps_pool pool, int64_t dim, int64_t nbags,
                   const int64_t *offsets, int64_t nids, const int64_t *index,
                   const float *dout, int64_t nuniq, float *grad, int64_t *bad) {
  if (dim < 0 || nbags < 0 || nids < 0 || nuniq < 0 || !offsets ||
      (pool != HPS_POOL_SUM && pool != HPS_POOL_MEAN))
    return HPS_EINVAL;
  int rc = check_offsets(nbags, offsets, nids, bad);
  if (rc != HPS_OK) return rc;
  const int64_t n = offsets[nbags] - offsets[0];
  if (n > 0 && !index) return HPS_EINVAL;
  if ((rc = check_ids(n, index, nuniq, bad)) != HPS_OK) return rc;
  if (nuniq == 0 || dim == 0) return HPS_OK;
  if (!grad || (n > 0 && !dout)) return HPS_EINVAL;
  memset(grad, 0, (size_t)(nuniq * dim) * sizeof(float));
  switch (isa) {
    case HPS_ISA_AVX512: bwd_avx512(pool, dim, nbags, offsets, index, dout, grad); break;
    case HPS_ISA_AVX2: bwd_avx2(pool, dim, nbags, offsets, index, dout, grad); break;
    default: bwd_scalar(pool, dim, nbags, offsets, index, dout, grad); break;
  }
  return HPS_OK;
}

/* ---- split over the pool ---------------------------------------------------- */

typedef struct {
  hps_isa isa;
  hps_pool pool;
  int64_t table_rows, dim, nbags, grain;
  const float *table;
  const int64_t *offsets, *ids;
  float *out;
  atomic_int rc; /* the first piece's failure */
  int64_t bad;
} embbag_split;

static void embbag_piece(void *ctx, int64_t piece) {
  embbag_split *s = ctx;
  int64_t lo, hi, bad = 0;
  piece_bounds(piece, s->grain, s->nbags, &lo, &hi);
  int rc = hps_embbag_fwd(s->isa, s->pool, s->table_rows, s->dim, s->table, hi - lo, s->offsets + lo,
                          s->offsets[hi] - s->offsets[lo], s->ids + (s->offsets[lo] - s->offsets[0]),
                          s->out + lo * s->dim, &bad);
  first_failure(&s->rc, &s->bad, rc, bad);
}

int hps_embbag_fwd_split(hps_isa isa, hps_pool pool, int64_t table_rows, int64_t dim,
                         const float *table, int64_t nbags, const int64_t *offsets,
                         const int64_t *ids, float *out, int64_t grain, int threads, int64_t *bad) {
  if (nbags < 0 || grain < 1 || !offsets) return HPS_EINVAL;
  if (nbags == 0) return HPS_OK;
  embbag_split s = {isa, pool, table_rows, dim, nbags, grain, table, offsets, ids, out, HPS_OK, 0};
  hps_parallel(piece_count(nbags, grain), threads, embbag_piece, &s);
  return split_status(&s.rc, s.bad, bad);
}
