/* A pool of helper threads for kernels split into pieces (hps_parallel):
 * the row blocks of a GEMM (hps_sgemm_rows), the bags of an embedding-bag
 * forward, the rows of a sparse optimiser step.
 *
 * Go used to run each piece on a goroutine of its own. Two goroutines in
 * cgo calls on two cores ran a 512x512x247 GEMM's halves in 450-790 us on
 * the 2-core Zen 5 VM, where two pthreads handed the same halves took
 * 360-430 us (the whole GEMM on one thread: ~700): the Go scheduler's
 * hand-offs around cgo calls (a P retaken from the calling M, another M
 * woken for the second goroutine) cost about as much as the split saves.
 * Here the caller claims pieces itself, and helper pthreads, outside the
 * Go scheduler, claim the others. A helper that has finished spins for
 * HPS_POOL_SPIN_NS looking for the next job (the ops of a forward pass
 * follow one another closely), yielding the CPU now and then, and then
 * sleeps on a condition variable. The caller never waits for a helper that
 * has not started: what no helper has claimed, it runs, so a busy or slow
 * helper costs parallelism, never progress. Pieces have fixed bounds, so
 * results do not depend on which thread ran which.
 *
 * Helper k stands for thread k of a backend whose threads are pinned one to
 * a CPU (hps_pool_pin): a caller pinned as thread b (hps_pool_set_base)
 * shares with helpers b+1 ..., so that two lanes of a step, each on CPUs
 * of its own, never hand pieces to each other's CPUs. */
#define _GNU_SOURCE /* pthread_setaffinity_np */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "heterps_kernels.h"

#define HPS_POOL_MAX (HPS_MAX_THREADS - 1) /* helpers; the caller is the other thread */
#define HPS_POOL_SPIN_NS 100000

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct hps_job {
  void (*fn)(void *ctx, int64_t piece);
  void *ctx;
  int64_t pieces;
  atomic_llong next; /* the next piece to claim */
  atomic_llong left; /* pieces not finished */
  atomic_int refs;   /* the caller, and each helper that may still take it */
} hps_job;

typedef struct {
  _Atomic(hps_job *) slot; /* the job offered, until taken or withdrawn */
  atomic_int sleeping;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  atomic_llong ran; /* pieces run, for tests */
} hps_helper;

/* pool[k-1] is helper k. */
static hps_helper pool[HPS_POOL_MAX];
static _Thread_local int base; /* the calling thread's number; see hps_pool_set_base */
static atomic_int started; /* helpers running */
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void job_release(hps_job *j) {
  if (atomic_fetch_sub(&j->refs, 1) == 1) free(j);
}

/* run_pieces claims and runs pieces until none is left; it returns how
 * many it ran. */
static int64_t run_pieces(hps_job *j) {
  int64_t ran = 0;
  for (;;) {
    int64_t p = atomic_fetch_add(&j->next, 1);
    if (p >= j->pieces) return ran;
    j->fn(j->ctx, p);
    ran++;
    atomic_fetch_sub(&j->left, 1);
  }
}

/* take waits for a job: spinning for HPS_POOL_SPIN_NS, then asleep. */
static hps_job *take(hps_helper *h) {
  for (;;) {
    int64_t start = now_ns();
    for (int i = 1;; i++) {
      if (atomic_load_explicit(&h->slot, memory_order_relaxed) != NULL) {
        hps_job *j = atomic_exchange(&h->slot, NULL);
        if (j != NULL) return j;
      }
      cpu_relax();
      if (i % 256 == 0) {
        if (now_ns() - start > HPS_POOL_SPIN_NS) break;
        sched_yield(); /* a runnable thread on this CPU goes first */
      }
    }
    pthread_mutex_lock(&h->mu);
    atomic_store(&h->sleeping, 1);
    while (atomic_load(&h->slot) == NULL) pthread_cond_wait(&h->cv, &h->mu);
    atomic_store(&h->sleeping, 0);
    pthread_mutex_unlock(&h->mu);
  }
}

static void *helper_main(void *arg) {
  hps_helper *h = arg;
  for (;;) {
    hps_job *j = take(h);
    atomic_fetch_add(&h->ran, run_pieces(j));
    job_release(j);
  }
  return NULL;
}

/* ensure_helpers starts helpers up to n (at most HPS_POOL_MAX) and returns
 * how many run: fewer if a thread could not be created. */
static int ensure_helpers(int n) {
  if (n > HPS_POOL_MAX) n = HPS_POOL_MAX;
  int have = atomic_load(&started);
  if (have >= n) return n;
  pthread_mutex_lock(&start_mu);
  /* Helpers inherit a mask blocking every signal but SIGPROF, so that the
   * process's signals (SIGTERM, SIGINT, ...) go to Go's threads; Go's CPU
   * profiler counts a helper's SIGPROF as external code. */
  sigset_t all, old;
  sigfillset(&all);
  sigdelset(&all, SIGPROF);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  have = atomic_load(&started);
  while (have < n) {
    hps_helper *h = &pool[have];
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, helper_main, h);
    pthread_attr_destroy(&attr);
    if (err != 0) break;
    h->thread = t;
    atomic_store(&started, ++have);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_mutex_unlock(&start_mu);
  return have < n ? have : n;
}

/* offer gives j to helper h if its slot is free; reports whether it did. */
static int offer(hps_helper *h, hps_job *j) {
  hps_job *none = NULL;
  atomic_fetch_add(&j->refs, 1);
  if (!atomic_compare_exchange_strong(&h->slot, &none, j)) {
    atomic_fetch_sub(&j->refs, 1); /* not the last: the caller holds one */
    return 0;
  }
  if (atomic_load(&h->sleeping)) {
    pthread_mutex_lock(&h->mu);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
  }
  return 1;
}

/* withdraw takes back an offer no helper took. */
static void withdraw(hps_helper *h, hps_job *j) {
  hps_job *mine = j;
  if (atomic_compare_exchange_strong(&h->slot, &mine, NULL)) atomic_fetch_sub(&j->refs, 1);
}

void hps_parallel(int64_t pieces, int threads, void (*fn)(void *ctx, int64_t piece), void *ctx) {
  int helpers = threads - 1;
  if (pieces - 1 < helpers) helpers = (int)(pieces - 1);
  if (base + helpers > HPS_POOL_MAX) helpers = HPS_POOL_MAX - base;
  hps_job *j = NULL;
  if (helpers > 0) helpers = ensure_helpers(base + helpers) - base;
  if (helpers > 0) j = malloc(sizeof *j);
  if (j == NULL) { /* nothing to share, or no memory to share it with */
    for (int64_t p = 0; p < pieces; p++) fn(ctx, p);
    return;
  }
  j->fn = fn;
  j->ctx = ctx;
  j->pieces = pieces;
  atomic_init(&j->next, 0);
  atomic_init(&j->left, pieces);
  atomic_init(&j->refs, 1);
  int offered[HPS_POOL_MAX];
  int n = 0;
  for (int i = base; i < base + helpers; i++)
    if (offer(&pool[i], j)) offered[n++] = i;
  run_pieces(j);
  while (atomic_load(&j->left) > 0) cpu_relax(); /* a helper's last piece */
  for (int i = 0; i < n; i++) withdraw(&pool[offered[i]], j);
  job_release(j);
}

int64_t hps_pool_helper_pieces(int helper) {
  int n = atomic_load(&started);
  if (helper > 0) return helper <= n ? atomic_load(&pool[helper - 1].ran) : 0;
  int64_t all = 0;
  for (int k = 0; k < n; k++) all += atomic_load(&pool[k].ran);
  return all;
}

void hps_pool_set_base(int b) { base = b < 0 ? 0 : b > HPS_POOL_MAX ? HPS_POOL_MAX : b; }

int hps_pool_pin(int helper, const int *cpus, int ncpus) {
  if (helper < 1 || helper > HPS_POOL_MAX || ncpus < 1) return EINVAL;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < ncpus; i++) {
    if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) return EINVAL;
    CPU_SET(cpus[i], &set);
  }
  if (ensure_helpers(helper) < helper) return EAGAIN;
  return pthread_setaffinity_np(pool[helper - 1].thread, sizeof set, &set);
}

int hps_pool_pinned_cpu(int helper) {
  if (helper < 1 || helper > atomic_load(&started)) return -1;
  cpu_set_t set;
  if (pthread_getaffinity_np(pool[helper - 1].thread, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}
