// GEMM through cuBLAS (heterps_cuda.h section 1).
//
// cuBLAS is column-major; a row-major C = op(A) op(B) is, read column-major,
// C^T = op(B)^T op(A)^T, so the call swaps the operands (and m with n) and
// keeps each operand's transpose flag and stride: the usual swap trick.
//
// libcublas is opened with dlopen on first use rather than linked, so a
// binary built with -tags cuda starts (and reports "no device") on machines
// without the CUDA libraries. The function pointers are declared with the
// types of cublas_v2.h, so a signature change breaks the build, not the run.
#include <cublas_v2.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.cuh"

struct hps_cuda_blas {
  cublasHandle_t h;
  cudaStream_t s;
};

namespace hps {
namespace {

struct BlasLib {
  void *dl = nullptr;
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
};

BlasLib blas;
pthread_once_t blas_once = PTHREAD_ONCE_INIT;

template <class F>
bool sym(void *dl, const char *name, F *out) {
  *out = reinterpret_cast<F>(dlsym(dl, name));
  return *out != nullptr;
}

void load_blas() {
  char name[64];
  const char *path = getenv("HETERPS_CUBLAS");
  if (!path || !*path) {
    snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    path = name;
  }
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) return;
  BlasLib b;
  b.dl = dl;
  if (sym(dl, "cublasCreate_v2", &b.create) && sym(dl, "cublasDestroy_v2", &b.destroy) &&
      sym(dl, "cublasSetStream_v2", &b.set_stream) &&
      sym(dl, "cublasSetMathMode", &b.set_math_mode) && sym(dl, "cublasSgemm_v2", &b.sgemm)) {
    blas = b;
    return;
  }
  dlclose(dl);
}

int blas_status(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? HPS_OK : HPS_CUDA_EBLAS + (int)s;
}

// C = beta * C over an [m x n] block with row stride ldc (what GEMM means
// when k == 0; beta == 0 clears C even where it held NaN).
__global__ void scale_k(int64_t m, int64_t n, float *c, int64_t ldc, float beta) {
  const int64_t total = m * n;
  for (int64_t i = gtid(); i < total; i += gstride()) {
    float *p = c + (i / n) * ldc + i % n;
    *p = beta == 0.0f ? 0.0f : beta * *p;
  }
}

}  // namespace
}  // namespace hps

using namespace hps;

extern "C" int hps_cuda_blas_create(cudaStream_t stream, int allow_tf32, hps_cuda_blas **out) {
  if (!out) return HPS_EINVAL;
  *out = nullptr;
  pthread_once(&blas_once, load_blas);
  if (!blas.dl) return HPS_CUDA_ENOBLAS;
  hps_cuda_blas *h = static_cast<hps_cuda_blas *>(calloc(1, sizeof *h));
  if (!h) return HPS_CUDA_EBLAS + CUBLAS_STATUS_ALLOC_FAILED;
  h->s = stream;
  int st = blas_status(blas.create(&h->h));
  if (st == HPS_OK) st = blas_status(blas.set_stream(h->h, stream));
  if (st == HPS_OK)
    st = blas_status(blas.set_math_mode(h->h, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                         : CUBLAS_DEFAULT_MATH));
  if (st != HPS_OK) {
    hps_cuda_blas_destroy(h);
    return st;
  }
  *out = h;
  return HPS_OK;
}

extern "C" void hps_cuda_blas_destroy(hps_cuda_blas *h) {
  if (!h) return;
  if (h->h) blas.destroy(h->h);
  free(h);
}

extern "C" int hps_cuda_sgemm(hps_cuda_blas *h, int trans_a, int trans_b, int64_t m, int64_t n,
                              int64_t k, float alpha, const float *a, int64_t lda,
                              const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (!h || m < 0 || n < 0 || k < 0) return HPS_EINVAL;
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) ||
      ldc < (n > 1 ? n : 1))
    return HPS_EINVAL;
  if (m == 0 || n == 0) return HPS_OK;
  if (!c) return HPS_EINVAL;
  if (k == 0) {
    scale_k<<<blocks_for(m * n), kBlock, 0, h->s>>>(m, n, c, ldc, beta);
    return launched();
  }
  if (!a || !b) return HPS_EINVAL;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
      ldc > INT_MAX)
    return HPS_EINVAL;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  return blas_status(blas.sgemm(h->h, op_b, op_a, (int)n, (int)m, (int)k, &alpha, b, (int)ldb,
                                a, (int)lda, &beta, c, (int)ldc));
}
