/*
 * rows.h — what the kernels that touch a big table's rows or an id map's
 * cells at random share (embbag.c, optim.c, idprobe.c): splitmix64's
 * finaliser, and asking for rows ROW_PREFETCH ids ahead of the one worked on,
 * since each is a cache miss the kernel would otherwise wait on in turn
 * (bench/kernels' sparse-row section measures what it buys). The switch,
 * hps_set_row_prefetch, is in rows.c.
 */
#ifndef HPS_ROWS_H
#define HPS_ROWS_H

#include <stdint.h>

#include "heterps_kernels.h"

enum { ROW_PREFETCH = 8, PREFETCH_LINES = 4 };

/* mix64 is splitmix64's finaliser: sequential ids, strided ids and ids that
 * differ only in high bits all spread over the low bits used as slot. */
static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/* A row's first PREFETCH_LINES cache lines and its last (a row may straddle
 * one more line); rw is __builtin_prefetch's, which must be a constant. */
#define PREFETCH_ROW(row, dim, rw)                                             \
  do {                                                                         \
    const int64_t lines_ = ((dim) * (int64_t)sizeof(float) + 63) / 64;         \
    for (int64_t l_ = 0; l_ < lines_ && l_ < PREFETCH_LINES; l_++)             \
      __builtin_prefetch((row) + 16 * l_, rw);                                 \
    __builtin_prefetch((row) + (dim) - 1, rw);                                 \
  } while (0)

static inline void prefetch_row_read(const float *row, int64_t dim) { PREFETCH_ROW(row, dim, 0); }

static inline void prefetch_row_write(const float *row, int64_t dim) { PREFETCH_ROW(row, dim, 1); }

#endif
