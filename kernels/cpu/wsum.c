/* Weighted sum of k buffers (scalar reference, AVX2, AVX-512). Contract:
 * heterps_kernels.h, section 4.
 *
 * Each variant walks the output in blocks of 4 vectors, accumulates all k
 * inputs of a block in registers and stores the block once, so the output
 * is written once and every input read once: one pass over memory. */
#include <immintrin.h>

#include "heterps_kernels.h"

#define AVX2_FN __attribute__((target("avx2,fma")))
#define AVX512_FN __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

static void wsum_scalar(int64_t n, int64_t k, const float *const *g, const float *w, float *out) {
  for (int64_t i = 0; i < n; i++) {
    float s = 0.0f;
    for (int64_t q = 0; q < k; q++) s += w[q] * g[q][i];
    out[i] = s;
  }
}

static const int32_t mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

AVX2_FN static void wsum_avx2(int64_t n, int64_t k, const float *const *g, const float *w,
                              float *out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t q = 0; q < k; q++) {
      const __m256 wq = _mm256_set1_ps(w[q]);
      const float *p = g[q] + i;
      a0 = _mm256_fmadd_ps(wq, _mm256_loadu_ps(p), a0);
      a1 = _mm256_fmadd_ps(wq, _mm256_loadu_ps(p + 8), a1);
      a2 = _mm256_fmadd_ps(wq, _mm256_loadu_ps(p + 16), a2);
      a3 = _mm256_fmadd_ps(wq, _mm256_loadu_ps(p + 24), a3);
    }
    _mm256_storeu_ps(out + i, a0);
    _mm256_storeu_ps(out + i + 8, a1);
    _mm256_storeu_ps(out + i + 16, a2);
    _mm256_storeu_ps(out + i + 24, a3);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_setzero_ps();
    for (int64_t q = 0; q < k; q++)
      a = _mm256_fmadd_ps(_mm256_set1_ps(w[q]), _mm256_loadu_ps(g[q] + i), a);
    _mm256_storeu_ps(out + i, a);
  }
  if (i < n) { /* masked only here: vmaskmovps stores are slow on AMD CPUs */
    const __m256i m = _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - (n - i)));
    __m256 a = _mm256_setzero_ps();
    for (int64_t q = 0; q < k; q++)
      a = _mm256_fmadd_ps(_mm256_set1_ps(w[q]), _mm256_maskload_ps(g[q] + i, m), a);
    _mm256_maskstore_ps(out + i, m, a);
  }
}

AVX512_FN static void wsum_avx512(int64_t n, int64_t k, const float *const *g, const float *w,
                                  float *out) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t q = 0; q < k; q++) {
      const __m512 wq = _mm512_set1_ps(w[q]);
      const float *p = g[q] + i;
      a0 = _mm512_fmadd_ps(wq, _mm512_loadu_ps(p), a0);
      a1 = _mm512_fmadd_ps(wq, _mm512_loadu_ps(p + 16), a1);
      a2 = _mm512_fmadd_ps(wq, _mm512_loadu_ps(p + 32), a2);
      a3 = _mm512_fmadd_ps(wq, _mm512_loadu_ps(p + 48), a3);
    }
    _mm512_storeu_ps(out + i, a0);
    _mm512_storeu_ps(out + i + 16, a1);
    _mm512_storeu_ps(out + i + 32, a2);
    _mm512_storeu_ps(out + i + 48, a3);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t q = 0; q < k; q++)
      a = _mm512_fmadd_ps(_mm512_set1_ps(w[q]), _mm512_loadu_ps(g[q] + i), a);
    _mm512_storeu_ps(out + i, a);
  }
  if (i < n) { /* masked only here: masked stores are slow on some CPUs (AMD Zen 4) */
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    __m512 a = _mm512_setzero_ps();
    for (int64_t q = 0; q < k; q++)
      a = _mm512_fmadd_ps(_mm512_set1_ps(w[q]), _mm512_maskz_loadu_ps(m, g[q] + i), a);
    _mm512_mask_storeu_ps(out + i, m, a);
  }
}

void hps_weighted_sum(hps_isa isa, int64_t n, int64_t k, const float *const *g, const float *w,
                      float *out) {
  if (n <= 0 || k < 0 || !out || (k > 0 && (!g || !w))) return;
  switch (isa) {
    case HPS_ISA_AVX512: wsum_avx512(n, k, g, w, out); break;
    case HPS_ISA_AVX2: wsum_avx2(n, k, g, w, out); break;
    default: wsum_scalar(n, k, g, w, out); break;
  }
}
