/* GEMM through OpenBLAS (heterps does not write its own GEMM) and the
 * memcpy bandwidth reference. */
#include <cblas.h>
#include <string.h>

#include "heterps_kernels.h"
#include "pool.h"

int hps_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
              float *c, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0) return HPS_EINVAL;
  if (m == 0 || n == 0) return HPS_OK;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
              (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
  return HPS_OK;
}

int hps_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
  return openblas_get_num_threads();
}

void hps_copy(int64_t n, const float *src, float *dst) {
  if (n > 0) memcpy(dst, src, (size_t)n * sizeof(float));
}

/* One call's operands, split into blocks of grain rows of C. */
typedef struct {
  int trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc, grain;
  float alpha, beta;
  const float *a, *b;
  float *c;
} gemm_rows;

static void gemm_block(void *ctx, int64_t piece) {
  const gemm_rows *g = ctx;
  int64_t lo, hi;
  piece_bounds(piece, g->grain, g->m, &lo, &hi);
  int64_t a_off = g->trans_a ? lo : lo * g->lda; /* rows lo..hi of op(A) */
  hps_sgemm(g->trans_a, g->trans_b, hi - lo, g->n, g->k, g->alpha, g->a + a_off, g->lda, g->b, g->ldb,
            g->beta, g->c + lo * g->ldc, g->ldc);
}

int hps_sgemm_rows(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                   int64_t ldc, int64_t grain, int threads) {
  if (m < 0 || n < 0 || k < 0 || grain < 1) return HPS_EINVAL;
  if (m == 0 || n == 0) return HPS_OK;
  gemm_rows g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, grain, alpha, beta, a, b, c};
  hps_parallel(piece_count(m, grain), threads, gemm_block, &g);
  return HPS_OK;
}
