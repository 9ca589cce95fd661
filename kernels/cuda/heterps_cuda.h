/*
 * heterps_cuda.h — the C API of heterps' CUDA kernels: host-callable launch
 * wrappers, one per op of heterps_kernels.h, over device memory.
 *
 * Conventions (all wrappers):
 *   - Every pointer argument is a device pointer unless its comment says
 *     "host". float32 tensors, row-major, sizes as int64_t, as on the CPU.
 *   - Work is queued on the given stream and the wrapper returns without
 *     waiting, except where a comment says it synchronises. Temporary device
 *     memory comes from hps_cuda_malloc (the stream-ordered allocator where
 *     the device has memory pools) and is freed in stream order.
 *   - Return value: HPS_OK (0); a negative HPS_E* code for a bad argument,
 *     detected before anything is queued; a positive cudaError_t from the
 *     runtime; or HPS_CUDA_EBLAS + cublasStatus_t from cuBLAS. hps_cuda_strerror
 *     names any of them.
 *   - Index arguments (ids, rows, labels) are validated by the caller, on the
 *     host, before upload: the kernels never read or write outside their
 *     buffers when an index is out of range (they skip it), but the result is
 *     then unspecified.
 *   - Reductions run in a fixed order that depends on the sizes only, never
 *     on the device: results are deterministic, run after run.
 *   - Sizes: element counts up to 2^62; where cuBLAS or CUB take 32-bit
 *     counts (GEMM dimensions, the sort in embedding-bag backward and unique)
 *     larger counts return HPS_EINVAL.
 */
#ifndef HETERPS_CUDA_H
#define HETERPS_CUDA_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "heterps_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuBLAS status s is reported as HPS_CUDA_EBLAS + s. */
#define HPS_CUDA_EBLAS 100000
/* libcublas could not be loaded (it is opened at run time, so that binaries
 * built with CUDA start on machines without it). */
#define HPS_CUDA_ENOBLAS (-10)

/* A short name for any status these functions return ("cudaErrorMemoryAllocation",
 * "HPS_EINVAL", "CUBLAS_STATUS_NOT_INITIALIZED", ...). Never NULL. */
const char *hps_cuda_strerror(int status);

/* ---- 1. GEMM (cuBLAS, opened at run time) -----------------------------------
 * A handle binds cuBLAS to one stream. allow_tf32 lets cuBLAS use TF32 tensor
 * cores (about 10 significant bits of the inputs); 0 keeps full FP32. The
 * library is libcublas.so.<major> of the toolkit the kernels were built with,
 * or the file named by the HETERPS_CUBLAS environment variable. */
typedef struct hps_cuda_blas hps_cuda_blas;
int hps_cuda_blas_create(cudaStream_t stream, int allow_tf32, hps_cuda_blas **out);
void hps_cuda_blas_destroy(hps_cuda_blas *h);

/* C[m x n] = alpha * op(A) * op(B) + beta * C, row-major with row strides
 * lda, ldb, ldc, exactly as hps_sgemm. k == 0 gives C = beta * C (C = 0 when
 * beta == 0, whatever C held). Queued on the handle's stream. */
int hps_cuda_sgemm(hps_cuda_blas *h, int trans_a, int trans_b, int64_t m, int64_t n,
                   int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                   int64_t ldb, float beta, float *c, int64_t ldc);

/* ---- 2. Fused bias + activation ---------------------------------------------
 * As hps_bias_act_fwd / hps_bias_act_bwd; in place allowed the same way.
 * dbias is a column reduction: per-block partial sums in a fixed order, then a
 * second pass over the partials (no atomics). */
int hps_cuda_bias_act_fwd(cudaStream_t s, hps_act act, int64_t rows, int64_t cols,
                          const float *x, const float *bias, float *y);
int hps_cuda_bias_act_bwd(cudaStream_t s, hps_act act, int64_t rows, int64_t cols,
                          const float *y, const float *dy, float *dx, float *dbias);

/* ---- 3. Embedding bag --------------------------------------------------------
 * Forward as hps_embbag_fwd, with nids = offsets[nbags] (ids holds nids ids);
 * offsets and ids are device arrays already validated by the caller. */
int hps_cuda_embbag_fwd(cudaStream_t s, hps_pool pool, int64_t table_rows, int64_t dim,
                        const float *table, int64_t nbags, const int64_t *offsets,
                        int64_t nids, const int64_t *ids, float *out);

/* Unique ids in order of first occurrence, as hps_unique, on the device: a
 * stable radix sort of (id, position) over the low key_bits bits of the ids
 * (every id must be in [0, 2^key_bits); 1 <= key_bits <= 64), then segment
 * heads, first occurrences and their ranks by prefix sums. uniq (capacity n)
 * and index (n) are device arrays. Synchronises the stream to return the count
 * in *nuniq (host). n < 2^31. */
int hps_cuda_unique(cudaStream_t s, int64_t n, const int64_t *ids, int key_bits,
                    int64_t *uniq, int64_t *index, int64_t *nuniq);

/* Backward as hps_embbag_bwd: grad [nuniq x dim] = for each unique row, the
 * sum of s * dout[bag] over its occurrences, added in position order. The
 * duplicates are merged without atomics: a radix sort of (index, position)
 * groups each row's occurrences, and one thread group reduces each row. */
int hps_cuda_embbag_bwd(cudaStream_t s, hps_pool pool, int64_t dim, int64_t nbags,
                        const int64_t *offsets, int64_t nids, const int64_t *index,
                        const float *dout, int64_t nuniq, float *grad);

/* ---- 4. Weighted sum of K buffers ---------------------------------------------
 * out[i] = sum_k w[k] * g[k][i], added in k order. g (k device pointers) and w
 * (k floats) are HOST arrays; they are passed by value to the kernel, 32 at a
 * time. out may be one of the g[k] (the same start) but must not partially
 * overlap any. k == 0 gives zeros. */
int hps_cuda_weighted_sum(cudaStream_t s, int64_t n, int64_t k, const float *const *g,
                          const float *w, float *out);

/* ---- 5. Optimisers --------------------------------------------------------------
 * As hps_sgd ... hps_adam_rows; o is a HOST pointer. rows is a device array of
 * nrows distinct, validated row indices. As on the CPU, SGD keeps a velocity
 * buffer whenever v is not NULL. Adam's c1 = 1/(1-b1^t), c2 = 1/(1-b2^t) are
 * computed once per call, on the host, in double. */
int hps_cuda_sgd(cudaStream_t s, int64_t n, float *w, const float *g, float *v,
                 const hps_opt *o);
int hps_cuda_adagrad(cudaStream_t s, int64_t n, float *w, const float *g, float *a,
                     const hps_opt *o);
int hps_cuda_adam(cudaStream_t s, int64_t n, float *w, const float *g, float *m, float *v,
                  const hps_opt *o);
int hps_cuda_sgd_rows(cudaStream_t s, int64_t table_rows, int64_t dim, float *w,
                      int64_t nrows, const int64_t *rows, const float *g, float *v,
                      const hps_opt *o);
int hps_cuda_adagrad_rows(cudaStream_t s, int64_t table_rows, int64_t dim, float *w,
                          int64_t nrows, const int64_t *rows, const float *g, float *a,
                          const hps_opt *o);
int hps_cuda_adam_rows(cudaStream_t s, int64_t table_rows, int64_t dim, float *w,
                       int64_t nrows, const int64_t *rows, const float *g, float *m,
                       float *v, const hps_opt *o);

/* ---- 6. LSTM cell (pointwise part) ------------------------------------------------
 * As hps_lstm_fwd / hps_lstm_bwd (bias and dc may be NULL). */
int hps_cuda_lstm_fwd(cudaStream_t s, int64_t batch, int64_t hidden, const float *z,
                      const float *bias, const float *c_prev, float *gates, float *c,
                      float *h);
int hps_cuda_lstm_bwd(cudaStream_t s, int64_t batch, int64_t hidden, const float *gates,
                      const float *c_prev, const float *c, const float *dh,
                      const float *dc, float *dz, float *dc_prev);

/* ---- 7. Softmax and losses ------------------------------------------------------
 * Row softmax / log-softmax as hps_softmax_rows (in place allowed). */
int hps_cuda_softmax_rows(cudaStream_t s, int64_t rows, int64_t cols, const float *x,
                          float *y, int log);

/* BCE with logits: *loss (a DEVICE double) receives the sum of the terms of
 * hps_bce_logits_fwd, each computed in float and added in double: per-block
 * partials, then one block adds the partials in order. */
int hps_cuda_bce_logits_fwd(cudaStream_t s, int64_t n, const float *logits,
                            const float *labels, double *loss);
int hps_cuda_bce_logits_bwd(cudaStream_t s, int64_t n, const float *logits,
                            const float *labels, float scale, float *dx);

/* Softmax cross-entropy as hps_softmax_xent; labels is a device array of
 * validated class indices, *loss a DEVICE double, dx may be NULL. */
int hps_cuda_softmax_xent(cudaStream_t s, int64_t rows, int64_t cols, const float *logits,
                          const int64_t *labels, float scale, float *dx, double *loss);

/* ---- Helpers ---------------------------------------------------------------------*/
/* Stream-ordered device memory: cudaMallocAsync / cudaFreeAsync where the
 * device supports memory pools, else cudaMalloc / cudaFree (which
 * synchronise). Every temporary of these wrappers comes from here. */
int hps_cuda_malloc(cudaStream_t s, size_t bytes, void **p);
int hps_cuda_free(cudaStream_t s, void *p);

/* dst = src, n floats, device to device: the bandwidth reference. */
int hps_cuda_copy(cudaStream_t s, int64_t n, const float *src, float *dst);
/* dst[i] = v for n floats. */
int hps_cuda_fill(cudaStream_t s, int64_t n, float *dst, float v);

/* A stager copies host memory to the device through a ring of pinned
 * (page-locked) host buffers, so that the DMA engine reads them while the
 * caller goes on: a copy from pageable memory is staged by the driver and
 * runs at a fraction of the link's speed. One stager per stream; safe for
 * concurrent use. */
typedef struct hps_cuda_stager hps_cuda_stager;
int hps_cuda_stager_create(hps_cuda_stager **out);
/* Waits for the copies in flight, then frees the pinned buffers. */
void hps_cuda_stager_destroy(hps_cuda_stager *st);
/* Queues dst = src (bytes; src is host memory, dst device memory) on stream
 * s and returns once src may be reused: src is copied into the ring in
 * chunks, each sent with cudaMemcpyAsync, and a chunk's buffer is reused
 * only after its copy has run (an event). With st NULL it is one plain
 * cudaMemcpyAsync from pageable memory, which the driver stages itself. */
int hps_cuda_upload(hps_cuda_stager *st, cudaStream_t s, void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
