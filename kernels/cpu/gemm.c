/* GEMM through OpenBLAS (heterps does not write its own GEMM) and the
 * memcpy bandwidth reference. */
#include <cblas.h>
#include <string.h>

#include "heterps_kernels.h"

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
