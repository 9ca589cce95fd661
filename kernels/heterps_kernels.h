/*
 * heterps_kernels.h — the C API of heterps' native kernels.
 *
 * Conventions (all ops):
 *   - float32 tensors, row-major, lengths and dimensions as int64_t.
 *   - Every op that has vector variants takes an hps_isa as its first argument
 *     and runs the scalar reference, the AVX2 or the AVX-512 variant. The
 *     variants are compiled with per-function target attributes, so one binary
 *     runs on any x86-64; the caller (native/, Go) picks the ISA once at
 *     start-up from what the CPU supports.
 *   - Ops work on the range they are given; callers split large tensors into
 *     chunks (by rows) and run chunks on several threads. Reductions that span
 *     chunks (column sums, loss sums) return per-chunk partials that the
 *     caller adds in a fixed order, so results do not depend on thread count.
 *   - Functions that can fail on caller data return an int status: HPS_OK or a
 *     negative HPS_E* code; they validate before writing any output.
 *   - In-place use is allowed only where a comment says so.
 */
#ifndef HETERPS_KERNELS_H
#define HETERPS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { HPS_ISA_SCALAR = 0, HPS_ISA_AVX2 = 1, HPS_ISA_AVX512 = 2 } hps_isa;

typedef enum {
  HPS_ACT_IDENTITY = 0,
  HPS_ACT_RELU = 1,
  HPS_ACT_SIGMOID = 2,
  HPS_ACT_TANH = 3
} hps_act;

typedef enum { HPS_POOL_SUM = 0, HPS_POOL_MEAN = 1 } hps_pool;

#define HPS_OK 0
#define HPS_EINVAL (-1)  /* bad argument (negative size, null pointer, bad enum) */
#define HPS_ERANGE (-2)  /* an id or row index outside the table */
#define HPS_EORDER (-3)  /* CSR offsets not starting at 0 / not non-decreasing / past the id count */

/* ---- 1. GEMM (OpenBLAS) ---------------------------------------------------
 * C[m x n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T.
 * lda/ldb/ldc are the row strides of A, B, C as stored (row-major). */
int hps_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
              float *c, int64_t ldc);
/* Sets OpenBLAS' thread count (0 leaves it as is); returns the count in force. */
int hps_blas_threads(int n);
/* hps_sgemm on blocks of grain rows of C (and of op(A)), run on the calling
 * thread and up to threads-1 helper threads of the pool (hps_parallel): the
 * same blocks, so the same bits, whatever the threads. */
int hps_sgemm_rows(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                   int64_t ldc, int64_t grain, int threads);

/* ---- Thread pool ------------------------------------------------------------
 * Runs fn(ctx, p) for p in [0, pieces) on the calling thread and up to
 * threads-1 helper threads, which live for the process: pieces are claimed
 * in order, the caller runs what no helper claims, and it returns once all
 * are done. fn must not call back into Go. A split runs on at most
 * HPS_MAX_THREADS threads, the caller's among them (native.MaxThreads). */
#define HPS_MAX_THREADS 512
void hps_parallel(int64_t pieces, int threads, void (*fn)(void *ctx, int64_t piece), void *ctx);
/* Pieces helper k has run since the process started, all helpers' for
 * k = 0 (tests). */
int64_t hps_pool_helper_pieces(int helper);
/* Helpers are numbered by the thread they stand for: a caller whose base is
 * b (0 unless it set one) shares a split with helpers b+1 .. b+threads-1.
 * hps_pool_set_base sets the calling thread's base; hps_pool_pin lets
 * helper k (k >= 1, started if need be) run on the ncpus CPUs listed only,
 * and returns 0 or an errno; hps_pool_pinned_cpu is the one CPU helper k
 * may run on, or -1 (tests). */
void hps_pool_set_base(int base);
int hps_pool_pin(int helper, const int *cpus, int ncpus);
int hps_pool_pinned_cpu(int helper);

/* ---- 2. Fused bias + activation -------------------------------------------
 * Forward: y[r][c] = act(x[r][c] + bias[c]); bias may be NULL (no bias).
 * In place (y == x) allowed. */
void hps_bias_act_fwd(hps_isa isa, hps_act act, int64_t rows, int64_t cols,
                      const float *x, const float *bias, float *y);
/* Backward from the output y (not x): dx = dy * act'(y) elementwise, and, when
 * dbias is not NULL, dbias[c] = sum_r dx[r][c] (overwritten: the column sum of
 * the pre-activation gradient over these rows). In place (dx == dy) allowed. */
void hps_bias_act_bwd(hps_isa isa, hps_act act, int64_t rows, int64_t cols,
                      const float *y, const float *dy, float *dx, float *dbias);
/* The two above on pieces of grain rows, over the pool (hps_parallel) on up
 * to threads threads. The backward's piece p writes its column sums to
 * partials + p*cols (partials NULL: no column sums); the caller adds them
 * up in piece order, so that the sums do not depend on the thread count. */
void hps_bias_act_fwd_split(hps_isa isa, hps_act act, int64_t rows, int64_t cols,
                            const float *x, const float *bias, float *y, int64_t grain, int threads);
void hps_bias_act_bwd_split(hps_isa isa, hps_act act, int64_t rows, int64_t cols,
                            const float *y, const float *dy, float *dx, float *partials,
                            int64_t grain, int threads);

/* ---- 3. Embedding bag ------------------------------------------------------
 * A bag is a variable-length list of ids given in CSR form by nbags+1
 * non-decreasing offsets: bag j holds ids[offsets[j] - offsets[0] ..
 * offsets[j+1] - offsets[0]), and offsets[nbags] - offsets[0] <= nids. A whole
 * batch has offsets[0] == 0; a caller that splits the bags into chunks passes
 * offsets + lo and ids + (offsets[lo] - offsets[0]) for the chunk starting at
 * bag lo. With batch samples of slots slots each, bag j = sample*slots + slot,
 * and out [nbags x dim] is exactly [batch x slots*dim].
 * Forward: out[j] = sum (or mean) of table[id] over the bag; an empty bag gives
 * zeros. Validates offsets (HPS_EORDER, *bad = offset index) and ids
 * (0 <= id < table_rows, HPS_ERANGE, *bad = id index) before writing.
 * Reference loop (scale = 1, or 1/len for mean; lo/hi relative as above):
 *   for j: out[j][:] = 0; for i in lo..hi: out[j][c] += table[ids[i]][c];
 *          out[j][c] *= scale (mean, non-empty bags only) */
/* Row prefetching: the embedding-bag forward and the _rows optimisers ask
 * for the rows a few ids ahead of the one they work on, since a big table's
 * rows are cache misses. On by default; hps_set_row_prefetch(0) turns it off
 * so that a benchmark can measure what it buys. Set it while no kernel runs. */
void hps_set_row_prefetch(int on);
int hps_row_prefetch_on(void);

int hps_embbag_fwd(hps_isa isa, hps_pool pool, int64_t table_rows, int64_t dim,
                   const float *table, int64_t nbags, const int64_t *offsets, int64_t nids,
                   const int64_t *ids, float *out, int64_t *bad);
/* hps_embbag_fwd on pieces of grain bags, over the pool (hps_parallel) on up
 * to threads threads; ids are those of offsets[0]..offsets[nbags]. */
int hps_embbag_fwd_split(hps_isa isa, hps_pool pool, int64_t table_rows, int64_t dim,
                         const float *table, int64_t nbags, const int64_t *offsets,
                         const int64_t *ids, float *out, int64_t grain, int threads, int64_t *bad);

/* Unique ids in order of first occurrence: uniq receives them (capacity n),
 * index[i] = position of ids[i] in uniq. scratch must hold
 * hps_unique_scratch_len(n) int64s (an open-addressing hash table, load <= 1/2;
 * ids spanning no more values than that are indexed by value instead). Any
 * int64 is an id. Returns the number of unique ids, or HPS_EINVAL. */
int64_t hps_unique_scratch_len(int64_t n);
int64_t hps_unique(int64_t n, const int64_t *ids, int64_t *uniq, int64_t *index,
                   int64_t *scratch);
/* Index of the first id equal to an earlier one, or n when all n are distinct
 * (HPS_EINVAL on bad arguments); scratch as for hps_unique. */
int64_t hps_first_duplicate(int64_t n, const int64_t *ids, int64_t *scratch);

/* Backward: grad [nuniq x dim] is zeroed, then grad[index[i]] += scale * dout[j]
 * for every id i of bag j, in bag order then id order (scale = 1, or 1/len for
 * mean). Duplicates are merged into one row: the caller applies each unique
 * row to the table once. Offsets as for the forward (HPS_EORDER); validates
 * 0 <= index[i] < nuniq (HPS_ERANGE, *bad = i) before writing. */
int hps_embbag_bwd(hps_isa isa, hps_pool pool, int64_t dim, int64_t nbags,
                   const int64_t *offsets, int64_t nids, const int64_t *index,
                   const float *dout, int64_t nuniq, float *grad, int64_t *bad);

/* ---- 4. Weighted sum of K buffers ------------------------------------------
 * out[i] = sum_k w[k] * g[k][i], one pass over memory: each block of elements
 * accumulates all k inputs in registers and is stored once. g is an array of k
 * pointers. out may be one of the g[k] (the same start: each block is read
 * before it is written) but must not partially overlap any. Reference loop:
 *   for i: s = 0; for k: s += w[k] * g[k][i]; out[i] = s */
void hps_weighted_sum(hps_isa isa, int64_t n, int64_t k, const float *const *g,
                      const float *w, float *out);

/* ---- 5. Optimisers ---------------------------------------------------------
 * Dense updates over n parameters; sparse-row updates over the rows listed in
 * rows[0..nrows) of a [table_rows x dim] table, with g [nrows x dim] and state
 * tables shaped like the parameter table. rows must be unique (hps_unique,
 * hps_first_duplicate); the _rows functions validate 0 <= rows[r] < table_rows
 * (HPS_ERANGE, *bad = r) before writing. step is the 1-based step number
 * (Adam's bias correction). weight_decay adds weight_decay * w to the gradient
 * (L2): in the formulas below g stands for g + weight_decay * w. */
typedef struct {
  float lr;
  float momentum;     /* SGD: 0 disables the velocity buffer */
  float beta1, beta2; /* Adam */
  float eps;          /* Adagrad, Adam */
  float weight_decay;
  int64_t step;
} hps_opt;

/* SGD: v = momentum*v + g; w -= lr*v (v NULL: no velocity buffer, w -= lr*g). */
void hps_sgd(hps_isa isa, int64_t n, float *w, const float *g, float *v, const hps_opt *o);
/* Adagrad: a += g*g; w -= lr * g / (sqrt(a) + eps). */
void hps_adagrad(hps_isa isa, int64_t n, float *w, const float *g, float *a, const hps_opt *o);
/* Adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * w -= lr * (m * c1) / (sqrt(v * c2) + eps), c1 = 1/(1-b1^t), c2 = 1/(1-b2^t)
 * computed once per call in double and rounded to float. */
void hps_adam(hps_isa isa, int64_t n, float *w, const float *g, float *m, float *v,
              const hps_opt *o);
/* The dense update of kind (HPS_OPT_*, declared below) on pieces of grain
 * parameters, over the pool (hps_parallel) on up to threads threads; s0 is
 * the first state buffer, s1 Adam's second (NULL otherwise). An element's
 * update reads that element only, so results do not depend on the split. */
void hps_update_split(hps_isa isa, int kind, int64_t n, float *w, const float *g, float *s0,
                      float *s1, const hps_opt *o, int64_t grain, int threads);

int hps_sgd_rows(hps_isa isa, int64_t table_rows, int64_t dim, float *w, int64_t nrows,
                 const int64_t *rows, const float *g, float *v, const hps_opt *o, int64_t *bad);
int hps_adagrad_rows(hps_isa isa, int64_t table_rows, int64_t dim, float *w, int64_t nrows,
                     const int64_t *rows, const float *g, float *a, const hps_opt *o,
                     int64_t *bad);
int hps_adam_rows(hps_isa isa, int64_t table_rows, int64_t dim, float *w, int64_t nrows,
                  const int64_t *rows, const float *g, float *m, float *v, const hps_opt *o,
                  int64_t *bad);
/* The _rows kernel of kind (HPS_OPT_*) on pieces of grain rows, over the
 * pool (hps_parallel) on up to threads threads: rows must be distinct, so
 * that pieces touch disjoint table rows. s1 is Adam's second state (NULL
 * otherwise). The first failing piece's status is returned, bad its row. */
enum { HPS_OPT_SGD = 0, HPS_OPT_ADAGRAD = 1, HPS_OPT_ADAM = 2 };
int hps_rows_update_split(hps_isa isa, int kind, int64_t table_rows, int64_t dim, float *w,
                          int64_t nrows, const int64_t *rows, const float *g, float *s0, float *s1,
                          const hps_opt *o, int64_t grain, int threads, int64_t *bad);

/* ---- 6. LSTM cell (pointwise part) -----------------------------------------
 * The gate pre-activations z [batch x 4*hidden] come from one GEMM on [x, h];
 * gate order i, f, g, o. Forward, with bias [4*hidden] (may be NULL):
 *   i = sig(z_i+b_i), f = sig(z_f+b_f), g = tanh(z_g+b_g), o = sig(z_o+b_o)
 *   c = f*c_prev + i*g;  h = o*tanh(c)
 * gates [batch x 4*hidden] receives the activated i, f, g, o (saved for backward). */
void hps_lstm_fwd(hps_isa isa, int64_t batch, int64_t hidden, const float *z,
                  const float *bias, const float *c_prev, float *gates, float *c, float *h);
/* Backward: given dh and dc (gradient flowing into c from the next step; may be
 * NULL = zero), writes dz [batch x 4*hidden] (gradient of the pre-activations)
 * and dc_prev [batch x hidden]. */
void hps_lstm_bwd(hps_isa isa, int64_t batch, int64_t hidden, const float *gates,
                  const float *c_prev, const float *c, const float *dh, const float *dc,
                  float *dz, float *dc_prev);

/* ---- 7. Softmax and losses -------------------------------------------------
 * Row softmax (log_softmax when log != 0), numerically stable (max-shifted).
 * In place (y == x) allowed. */
void hps_softmax_rows(hps_isa isa, int64_t rows, int64_t cols, const float *x, float *y, int log);

/* Binary cross-entropy with logits: returns sum_i [max(x,0) - x*y + log1p(exp(-|x|))],
 * accumulated in double. Backward: dx[i] = scale * (sigmoid(x[i]) - y[i]), computed
 * as scale * ((1 - y[i]) - sigmoid(-x[i])) for x[i] >= 0 so that small gradients of
 * confident predictions survive. */
double hps_bce_logits_fwd(hps_isa isa, int64_t n, const float *logits, const float *labels);
void hps_bce_logits_bwd(hps_isa isa, int64_t n, const float *logits, const float *labels,
                        float scale, float *dx);

/* Softmax cross-entropy over rows with integer class labels: returns the sum of
 * -log softmax(x)[label] over rows (double), and, when dx is not NULL, writes
 * dx = scale * (softmax(x) - onehot(label)). Validates 0 <= label < cols before
 * writing (HPS_ERANGE, *bad = row); loss must not be NULL (HPS_EINVAL). */
int hps_softmax_xent(hps_isa isa, int64_t rows, int64_t cols, const float *logits,
                     const int64_t *labels, float scale, float *dx, double *loss,
                     int64_t *bad);

/* ---- 8. Id-map probes -------------------------------------------------------
 * A parameter server's rows are found through an open-addressing map: cap
 * cells (a power of two, at most half full) of keys[] and slots[] (slot+1; 0
 * marks an empty cell); id's first cell is mix64(id ^ 0x9e3779b97f4a7c15) &
 * (cap-1), with splitmix64's finaliser, and probing is linear. hps_probe_ids
 * writes each of ids' slot, or -1 when absent, to out and returns how many are
 * absent. The map's cells are cache misses in a big table: with row
 * prefetching on (hps_set_row_prefetch) the probe hashes ids a few ahead and
 * asks for their cells first; off, it probes one id after another (the
 * reference). A full map is searched once round (an absent id is -1).
 * Returns -1 when cap is not a power of two. */
int64_t hps_probe_ids(int64_t cap, const int64_t *keys, const int32_t *slots, int64_t n,
                      const int64_t *ids, int64_t *out);

/* ---- Helpers for benchmarks and tests --------------------------------------*/
/* dst = src, n floats (memcpy): the bandwidth reference. */
void hps_copy(int64_t n, const float *src, float *dst);

#ifdef __cplusplus
}
#endif
#endif
