// The gather bound of SpMV on this host: the time per element of `sum += v[i] * x[idx[i]]`
// with `x` in L1 (4096 f64) and random indices, the loop SpMV runs once per stored entry. No
// SpMV that gathers `x` entry by entry runs faster per entry on in-cache data; compare-anchors
// records it beside STREAM (machine.txt) to put ratios against other libraries in context.
// Four forms: 8-wide AVX-512 gathers, 4-wide AVX2 gathers, 8 lanes assembled from scalar loads
// (two 32-bit indices per 64-bit load, each element loaded and inserted into the vector: what
// Lacuna's code generator emits on Zen 4/5 instead of a gather, see target/src/gather.rs) and
// plain scalar loads, each with four independent accumulators; min of 3 rounds of 1000 passes
// over 65536 elements.
// Build: cc -O2 -march=native scripts/gather_bound.c -o gather_bound
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { X = 4096, N = 1 << 16, PASSES = 1000, ROUNDS = 3 };

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double x[X], v[N];
static int idx[N];
static volatile double sink;

static double scalar(void) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (int p = 0; p < PASSES; p++)
    for (int i = 0; i < N; i += 4) {
      a0 += v[i] * x[idx[i]];
      a1 += v[i + 1] * x[idx[i + 1]];
      a2 += v[i + 2] * x[idx[i + 2]];
      a3 += v[i + 3] * x[idx[i + 3]];
    }
  return a0 + a1 + a2 + a3;
}

#ifdef __AVX2__
#define STEP4(a, o) \
  a = _mm256_fmadd_pd(_mm256_loadu_pd(v + i + (o)), \
                      _mm256_i32gather_pd(x, _mm_loadu_si128((const __m128i *)(idx + i + (o))), 8), a)
static double gather4(void) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  for (int p = 0; p < PASSES; p++)
    for (int i = 0; i < N; i += 16) {
      STEP4(a0, 0);
      STEP4(a1, 4);
      STEP4(a2, 8);
      STEP4(a3, 12);
    }
  double out[4];
  _mm256_storeu_pd(out, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
  return out[0] + out[1] + out[2] + out[3];
}
#endif

#ifdef __AVX512F__
// 8 lanes gathered by one instruction.
static inline __m512d gather(const int *ix) {
  return _mm512_i32gather_pd(_mm256_loadu_si256((const __m256i *)ix), x, 8);
}

// 8 lanes from scalar loads: indices read in pairs, elements inserted into one vector.
static inline __m512d assemble(const int *ix) {
  const unsigned long long *q = (const unsigned long long *)ix;
  __m128d p[4];
  for (int k = 0; k < 4; k++) {
    unsigned long long w = q[k];
    p[k] = _mm_loadh_pd(_mm_load_sd(x + (int)(unsigned)w), x + (int)(w >> 32));
  }
  __m256d lo = _mm256_insertf128_pd(_mm256_castpd128_pd256(p[0]), p[1], 1);
  __m256d hi = _mm256_insertf128_pd(_mm256_castpd128_pd256(p[2]), p[3], 1);
  return _mm512_insertf64x4(_mm512_castpd256_pd512(lo), hi, 1);
}

// The sum with 8 lanes per step from LANES, four independent accumulators.
#define STEP8(a, o, LANES) a = _mm512_fmadd_pd(_mm512_loadu_pd(v + i + (o)), LANES(idx + i + (o)), a)
#define SUM8(name, LANES)                                                                        \
  static double name(void) {                                                                   \
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;                               \
    for (int p = 0; p < PASSES; p++)                                                           \
      for (int i = 0; i < N; i += 32) {                                                        \
        STEP8(a0, 0, LANES);                                                                   \
        STEP8(a1, 8, LANES);                                                                   \
        STEP8(a2, 16, LANES);                                                                  \
        STEP8(a3, 24, LANES);                                                                  \
      }                                                                                        \
    return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3))); \
  }
SUM8(gather8, gather)
SUM8(assembled8, assemble)
#endif

static void report(const char *name, double (*f)(void)) {
  double best = 1e30;
  for (int r = 0; r < ROUNDS; r++) {
    double t = seconds();
    sink = f();
    t = seconds() - t;
    if (t < best) best = t;
  }
  printf(" %s %.3f", name, best / ((double)PASSES * N) * 1e9);
}

int main(void) {
  unsigned s = 12345;
  for (int i = 0; i < X; i++) x[i] = 1.0 / (i + 1);
  for (int i = 0; i < N; i++) {
    s = s * 1103515245u + 12345u;
    idx[i] = (int)((s >> 8) % X);
    v[i] = 1.0 + (i & 7);
  }
  printf("gather bound, ns per element (x in L1):");
#ifdef __AVX512F__
  report("avx512-gather8", gather8);
  report("avx512-assembled8", assembled8);
#endif
#ifdef __AVX2__
  report("avx2-gather4", gather4);
#endif
  report("scalar", scalar);
  printf("\n");
  return 0;
}
