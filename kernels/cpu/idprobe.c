/* Id-map probes (scalar reference and a prefetching twin). Contract:
 * heterps_kernels.h, section 8.
 *
 * A probe is a chain of dependent loads, not arithmetic, so there is no
 * vector variant: the batched one hashes ROW_PREFETCH ids ahead of the one it
 * probes and asks for their first cells, whose misses then overlap. */
#include "heterps_kernels.h"
#include "rows.h"

static inline uint64_t cell_of(int64_t id, uint64_t mask) {
  return mix64((uint64_t)id ^ 0x9e3779b97f4a7c15ULL) & mask;
}

/* probe_from looks at most every cell once: a full map without id (which
 * the parameter server's, at most half full, never is) answers -1. */
static inline int64_t probe_from(uint64_t i, uint64_t mask, const int64_t *keys,
                                 const int32_t *slots, int64_t id) {
  for (uint64_t left = mask + 1; left > 0; left--, i = (i + 1) & mask) {
    const int32_t s = slots[i];
    if (s == 0) return -1;
    if (keys[i] == id) return (int64_t)s - 1;
  }
  return -1;
}

static int64_t probe_ref(uint64_t mask, const int64_t *keys, const int32_t *slots, int64_t n,
                         const int64_t *ids, int64_t *out) {
  int64_t missing = 0;
  for (int64_t j = 0; j < n; j++) {
    out[j] = probe_from(cell_of(ids[j], mask), mask, keys, slots, ids[j]);
    missing += out[j] < 0;
  }
  return missing;
}

static int64_t probe_ahead(uint64_t mask, const int64_t *keys, const int32_t *slots, int64_t n,
                           const int64_t *ids, int64_t *out) {
  uint64_t ring[ROW_PREFETCH];
  const int64_t first = n < ROW_PREFETCH ? n : ROW_PREFETCH;
  for (int64_t j = 0; j < first; j++) {
    ring[j] = cell_of(ids[j], mask);
    __builtin_prefetch(slots + ring[j]);
    __builtin_prefetch(keys + ring[j]);
  }
  int64_t missing = 0;
  for (int64_t j = 0; j < n; j++) {
    const uint64_t at = ring[j % ROW_PREFETCH];
    if (j + ROW_PREFETCH < n) {
      const uint64_t next = cell_of(ids[j + ROW_PREFETCH], mask);
      ring[j % ROW_PREFETCH] = next;
      __builtin_prefetch(slots + next);
      __builtin_prefetch(keys + next);
    }
    out[j] = probe_from(at, mask, keys, slots, ids[j]);
    missing += out[j] < 0;
  }
  return missing;
}

int64_t hps_probe_ids(int64_t cap, const int64_t *keys, const int32_t *slots, int64_t n,
                      const int64_t *ids, int64_t *out) {
  if (cap <= 0 || (cap & (cap - 1)) != 0) return -1;
  if (n <= 0) return 0;
  const uint64_t mask = (uint64_t)cap - 1;
  if (hps_row_prefetch_on()) return probe_ahead(mask, keys, slots, n, ids, out);
  return probe_ref(mask, keys, slots, n, ids, out);
}
