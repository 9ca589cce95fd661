/*
 * pool.h — what the kernels split over the pool (hps_parallel, pool.c)
 * share: how many pieces n items make, a piece's bounds, and how pieces
 * report the first failure and the caller returns it.
 */
#ifndef HPS_POOL_H
#define HPS_POOL_H

#include <stdatomic.h>
#include <stdint.h>

#include "heterps_kernels.h"

/* piece_count is the number of pieces of grain items n items make. */
static inline int64_t piece_count(int64_t n, int64_t grain) { return (n + grain - 1) / grain; }

/* piece_bounds gives piece's items [lo, hi) of n items cut by grain. */
static inline void piece_bounds(int64_t piece, int64_t grain, int64_t n, int64_t *lo, int64_t *hi) {
  *lo = piece * grain;
  *hi = *lo + grain < n ? *lo + grain : n;
}

/* first_failure keeps the first failing piece's status in *rc and its bad
 * index in *bad. */
static inline void first_failure(atomic_int *rc, int64_t *bad, int status, int64_t at) {
  int ok = HPS_OK;
  if (status != HPS_OK && atomic_compare_exchange_strong(rc, &ok, status)) *bad = at;
}

/* split_status is a split call's status once its pieces are done: the
 * first failure, its bad index stored in *out (when out is not NULL). */
static inline int split_status(atomic_int *rc, int64_t bad, int64_t *out) {
  int status = atomic_load(rc);
  if (status != HPS_OK && out) *out = bad;
  return status;
}

#endif
