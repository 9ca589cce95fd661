// Embedding bag forward, unique ids and the sparse backward (heterps_cuda.h
// section 3).
//
// Forward: a group of tx threads per bag (tx the power of two covering the
// row, at most 32, in float4 units when rows are 16-byte aligned) walks the
// bag's ids and adds whole table rows, loading four rows ahead of the adds.
//
// Unique and backward merge duplicates without atomics: a stable radix sort
// (CUB) of (key, position) pairs puts each key's occurrences together in
// position order; prefix sums over segment heads number the segments, and one
// thread group per unique row adds its occurrences in position order — the
// same order as the CPU reference, so results match it closely and never
// depend on scheduling.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <limits.h>

#include "common.cuh"

namespace hps {
namespace {

__device__ __forceinline__ float4 operator+(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ float4 operator*(float s, float4 a) {
  return make_float4(s * a.x, s * a.y, s * a.z, s * a.w);
}
template <class V>
__device__ __forceinline__ V zero();
template <>
__device__ __forceinline__ float zero<float>() {
  return 0.0f;
}
template <>
__device__ __forceinline__ float4 zero<float4>() {
  return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// Threads per row: the power of two covering dimv (at most 32); rows (bags)
// per block fill kBlock threads.
dim3 row_block(int64_t dimv) {
  unsigned tx = 1;
  while (tx < 32 && tx < dimv) tx <<= 1;
  return dim3(tx, kBlock / tx);
}

unsigned row_grid(int64_t nrows, dim3 block) {
  int64_t g = (nrows + block.y - 1) / block.y;
  if (g > kMaxBlocks) g = kMaxBlocks;
  return (unsigned)(g < 1 ? 1 : g);
}

// ---- forward ----------------------------------------------------------------

template <class V, bool MEAN>
__global__ void fwd_k(int64_t table_rows, int64_t dimv, const V *table, int64_t nbags,
                      const int64_t *offsets, int64_t nids, const int64_t *ids, V *out) {
  for (int64_t bag = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; bag < nbags;
       bag += (int64_t)gridDim.x * blockDim.y) {
    int64_t lo = offsets[bag], hi = offsets[bag + 1];
    if (lo < 0) lo = 0;
    if (hi > nids) hi = nids;
    const float s = (MEAN && hi > lo) ? 1.0f / (float)(hi - lo) : 1.0f;
    for (int64_t d = threadIdx.x; d < dimv; d += blockDim.x) {
      V acc = zero<V>();
      int64_t p = lo;
      for (; p + 4 <= hi; p += 4) {
        V r[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int64_t id = ids[p + u];
          r[u] = (id >= 0 && id < table_rows) ? table[id * dimv + d] : zero<V>();
        }
#pragma unroll
        for (int u = 0; u < 4; u++) acc = acc + r[u];
      }
      for (; p < hi; p++) {
        const int64_t id = ids[p];
        if (id >= 0 && id < table_rows) acc = acc + table[id * dimv + d];
      }
      out[bag * dimv + d] = MEAN ? s * acc : acc;
    }
  }
}

template <class V>
int launch_fwd(cudaStream_t s, bool mean, int64_t table_rows, int64_t dimv, const float *table,
               int64_t nbags, const int64_t *offsets, int64_t nids, const int64_t *ids,
               float *out) {
  const dim3 block = row_block(dimv);
  const unsigned grid = row_grid(nbags, block);
  const V *t = reinterpret_cast<const V *>(table);
  V *o = reinterpret_cast<V *>(out);
  if (mean)
    fwd_k<V, true><<<grid, block, 0, s>>>(table_rows, dimv, t, nbags, offsets, nids, ids, o);
  else
    fwd_k<V, false><<<grid, block, 0, s>>>(table_rows, dimv, t, nbags, offsets, nids, ids, o);
  return launched();
}

// ---- unique -----------------------------------------------------------------

__global__ void iota_k(int n, int *pos) {
  for (int64_t i = gtid(); i < n; i += gstride()) pos[i] = (int)i;
}

// head[k] = 1 where sorted key k starts a segment; first[pos] = 1 at the
// position of each segment's first occurrence (the smallest, as the sort is
// stable). first must be zeroed.
__global__ void heads_k(int n, const unsigned long long *keys, const int *pos, int *head,
                        int *first) {
  for (int64_t k = gtid(); k < n; k += gstride()) {
    const int h = k == 0 || keys[k] != keys[k - 1];
    head[k] = h;
    if (h) first[pos[k]] = 1;
  }
}

// With seg[k] = inclusive prefix sum of head (1-based segment number) and
// rank[p] = exclusive prefix sum of first (the order of first occurrences),
// segment heads record their rank and id; then every position takes the rank
// of its segment.
__global__ void ranks_k(int n, const unsigned long long *keys, const int *pos, const int *head,
                        const int *seg, const int *rank, int *seg_rank, int64_t *uniq) {
  for (int64_t k = gtid(); k < n; k += gstride()) {
    if (head[k]) {
      const int r = rank[pos[k]];
      seg_rank[seg[k] - 1] = r;
      uniq[r] = (int64_t)keys[k];
    }
  }
}

__global__ void index_k(int n, const int *pos, const int *seg, const int *seg_rank,
                        int64_t *index) {
  for (int64_t k = gtid(); k < n; k += gstride()) index[pos[k]] = seg_rank[seg[k] - 1];
}

// Sorts (keys, positions 0..n) by the low key_bits bits of the keys, stably.
// keys_out and pos_out receive the result.
int sort_pairs(cudaStream_t s, int n, const unsigned long long *keys, int key_bits,
               unsigned long long *keys_out, int *pos_in, int *pos_out) {
  iota_k<<<blocks_for(n), kBlock, 0, s>>>(n, pos_in);
  HPS_TRY(launched());
  size_t bytes = 0;
  HPS_TRY(status(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, keys_out, pos_in, pos_out,
                                                 n, 0, key_bits, s)));
  Scratch tmp(s);
  HPS_TRY(tmp.alloc(bytes));
  return status(cub::DeviceRadixSort::SortPairs(tmp.p, bytes, keys, keys_out, pos_in, pos_out, n,
                                                0, key_bits, s));
}

template <class T>
int scan(cudaStream_t s, bool inclusive, const T *in, T *out, int n) {
  size_t bytes = 0;
  if (inclusive)
    HPS_TRY(status(cub::DeviceScan::InclusiveSum(nullptr, bytes, in, out, n, s)));
  else
    HPS_TRY(status(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, s)));
  Scratch tmp(s);
  HPS_TRY(tmp.alloc(bytes));
  if (inclusive) return status(cub::DeviceScan::InclusiveSum(tmp.p, bytes, in, out, n, s));
  return status(cub::DeviceScan::ExclusiveSum(tmp.p, bytes, in, out, n, s));
}

// ---- backward ---------------------------------------------------------------

// bag_of[k] = the bag holding position pos[k]: the last j with offsets[j] <= p.
__global__ void bags_k(int n, const int *pos, int64_t nbags, const int64_t *offsets,
                       int *bag_of) {
  for (int64_t k = gtid(); k < n; k += gstride()) {
    const int64_t p = pos[k];
    int64_t lo = 0, hi = nbags;  // answer in [lo, hi)
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (offsets[mid] <= p)
        lo = mid;
      else
        hi = mid;
    }
    bag_of[k] = (int)lo;
  }
}

// start[u] = the first k with keys[k] >= u, for u in [0, nuniq]: row u's
// occurrences are [start[u], start[u+1]).
__global__ void starts_k(int n, const unsigned long long *keys, int64_t nuniq, int *start) {
  for (int64_t u = gtid(); u <= nuniq; u += gstride()) {
    int lo = 0, hi = n;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (keys[mid] < (unsigned long long)u)
        lo = mid + 1;
      else
        hi = mid;
    }
    start[u] = lo;
  }
}

template <class V, bool MEAN>
__global__ void bwd_k(int64_t dimv, int64_t nuniq, const int *start, const int *bag_of,
                      const int64_t *offsets, const V *dout, V *grad) {
  for (int64_t u = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; u < nuniq;
       u += (int64_t)gridDim.x * blockDim.y) {
    const int lo = start[u], hi = start[u + 1];
    for (int64_t d = threadIdx.x; d < dimv; d += blockDim.x) {
      V acc = zero<V>();
      for (int k = lo; k < hi; k++) {
        const int64_t j = bag_of[k];
        const V g = dout[j * dimv + d];
        if (MEAN) {
          const int64_t len = offsets[j + 1] - offsets[j];
          acc = acc + (1.0f / (float)len) * g;
        } else {
          acc = acc + g;
        }
      }
      grad[u * dimv + d] = acc;
    }
  }
}

template <class V>
int launch_bwd(cudaStream_t s, bool mean, int64_t dimv, int64_t nuniq, const int *start,
               const int *bag_of, const int64_t *offsets, const float *dout, float *grad) {
  const dim3 block = row_block(dimv);
  const unsigned grid = row_grid(nuniq, block);
  const V *d = reinterpret_cast<const V *>(dout);
  V *g = reinterpret_cast<V *>(grad);
  if (mean)
    bwd_k<V, true><<<grid, block, 0, s>>>(dimv, nuniq, start, bag_of, offsets, d, g);
  else
    bwd_k<V, false><<<grid, block, 0, s>>>(dimv, nuniq, start, bag_of, offsets, d, g);
  return launched();
}

int bits_for(int64_t max_key) {
  int b = 1;
  while (b < 64 && (max_key >> b) != 0) b++;
  return b;
}

}  // namespace
}  // namespace hps

using namespace hps;

extern "C" int hps_cuda_embbag_fwd(cudaStream_t s, hps_pool pool, int64_t table_rows,
                                   int64_t dim, const float *table, int64_t nbags,
                                   const int64_t *offsets, int64_t nids, const int64_t *ids,
                                   float *out) {
  if (table_rows < 0 || dim < 0 || nbags < 0 || nids < 0) return HPS_EINVAL;
  if (pool != HPS_POOL_SUM && pool != HPS_POOL_MEAN) return HPS_EINVAL;
  if (nbags == 0 || dim == 0) return HPS_OK;
  if (!offsets || !out || (nids > 0 && (!ids || !table))) return HPS_EINVAL;
  const bool mean = pool == HPS_POOL_MEAN;
  if (dim % 4 == 0 && aligned16(table) && aligned16(out))
    return launch_fwd<float4>(s, mean, table_rows, dim / 4, table, nbags, offsets, nids, ids, out);
  return launch_fwd<float>(s, mean, table_rows, dim, table, nbags, offsets, nids, ids, out);
}

extern "C" int hps_cuda_unique(cudaStream_t s, int64_t n, const int64_t *ids, int key_bits,
                               int64_t *uniq, int64_t *index, int64_t *nuniq) {
  if (n < 0 || n > INT_MAX || key_bits < 1 || key_bits > 64 || !nuniq) return HPS_EINVAL;
  *nuniq = 0;
  if (n == 0) return HPS_OK;
  if (!ids || !uniq || !index) return HPS_EINVAL;
  const int ni = (int)n;
  Scratch keys(s), pos(s), spos(s), head(s), seg(s), first(s), rank(s), seg_rank(s);
  HPS_TRY(keys.alloc(n * sizeof(unsigned long long)));
  HPS_TRY(pos.alloc(n * sizeof(int)));
  HPS_TRY(spos.alloc(n * sizeof(int)));
  HPS_TRY(head.alloc(n * sizeof(int)));
  HPS_TRY(seg.alloc(n * sizeof(int)));
  HPS_TRY(first.alloc(n * sizeof(int)));
  HPS_TRY(rank.alloc(n * sizeof(int)));
  HPS_TRY(seg_rank.alloc(n * sizeof(int)));
  const unsigned long long *in = reinterpret_cast<const unsigned long long *>(ids);
  unsigned long long *sk = keys.as<unsigned long long>();
  HPS_TRY(sort_pairs(s, ni, in, key_bits, sk, pos.as<int>(), spos.as<int>()));
  HPS_TRY(status(cudaMemsetAsync(first.p, 0, n * sizeof(int), s)));
  heads_k<<<blocks_for(n), kBlock, 0, s>>>(ni, sk, spos.as<int>(), head.as<int>(),
                                           first.as<int>());
  HPS_TRY(launched());
  HPS_TRY(scan<int>(s, true, head.as<int>(), seg.as<int>(), ni));
  HPS_TRY(scan<int>(s, false, first.as<int>(), rank.as<int>(), ni));
  ranks_k<<<blocks_for(n), kBlock, 0, s>>>(ni, sk, spos.as<int>(), head.as<int>(), seg.as<int>(),
                                           rank.as<int>(), seg_rank.as<int>(), uniq);
  HPS_TRY(launched());
  index_k<<<blocks_for(n), kBlock, 0, s>>>(ni, spos.as<int>(), seg.as<int>(), seg_rank.as<int>(),
                                           index);
  HPS_TRY(launched());
  int count = 0;
  HPS_TRY(status(cudaMemcpyAsync(&count, seg.as<int>() + (n - 1), sizeof(int),
                                 cudaMemcpyDeviceToHost, s)));
  HPS_TRY(status(cudaStreamSynchronize(s)));
  *nuniq = count;
  return HPS_OK;
}

extern "C" int hps_cuda_embbag_bwd(cudaStream_t s, hps_pool pool, int64_t dim, int64_t nbags,
                                   const int64_t *offsets, int64_t nids, const int64_t *index,
                                   const float *dout, int64_t nuniq, float *grad) {
  if (dim < 0 || nbags < 0 || nids < 0 || nuniq < 0 || nids > INT_MAX) return HPS_EINVAL;
  if (pool != HPS_POOL_SUM && pool != HPS_POOL_MEAN) return HPS_EINVAL;
  if (nuniq == 0 || dim == 0) return HPS_OK;
  if (!grad) return HPS_EINVAL;
  if (nids == 0 || nbags == 0) return hps_cuda_fill(s, nuniq * dim, grad, 0.0f);
  if (!offsets || !index || !dout) return HPS_EINVAL;
  const int ni = (int)nids;
  Scratch keys(s), pos(s), spos(s), bag_of(s), start(s);
  HPS_TRY(keys.alloc(nids * sizeof(unsigned long long)));
  HPS_TRY(pos.alloc(nids * sizeof(int)));
  HPS_TRY(spos.alloc(nids * sizeof(int)));
  HPS_TRY(bag_of.alloc(nids * sizeof(int)));
  HPS_TRY(start.alloc((nuniq + 1) * sizeof(int)));
  unsigned long long *sk = keys.as<unsigned long long>();
  HPS_TRY(sort_pairs(s, ni, reinterpret_cast<const unsigned long long *>(index),
                     bits_for(nuniq - 1), sk, pos.as<int>(), spos.as<int>()));
  bags_k<<<blocks_for(nids), kBlock, 0, s>>>(ni, spos.as<int>(), nbags, offsets,
                                             bag_of.as<int>());
  HPS_TRY(launched());
  starts_k<<<blocks_for(nuniq + 1), kBlock, 0, s>>>(ni, sk, nuniq, start.as<int>());
  HPS_TRY(launched());
  const bool mean = pool == HPS_POOL_MEAN;
  if (dim % 4 == 0 && aligned16(dout) && aligned16(grad))
    return launch_bwd<float4>(s, mean, dim / 4, nuniq, start.as<int>(), bag_of.as<int>(), offsets,
                              dout, grad);
  return launch_bwd<float>(s, mean, dim, nuniq, start.as<int>(), bag_of.as<int>(), offsets, dout,
                           grad);
}
