//go:build cuda

#include "shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define HPS_STR2(x) #x
#define HPS_STR(x) HPS_STR2(x)

#define HPS_CU_DEFINE(f) __typeof__(&f) hps_p_##f;
HPS_CU_FUNCS(HPS_CU_DEFINE)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_err[512];

static void load(void) {
  void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *e = dlerror(); /* the error worth reporting: the soname is the driver's */
    snprintf(load_err, sizeof load_err, "%s", e ? e : "libcuda.so.1: cannot open");
    dl = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!dl) return;
    load_err[0] = 0;
  }
#define HPS_CU_LOAD(f)                                                           \
  hps_p_##f = (__typeof__(hps_p_##f))dlsym(dl, HPS_STR(f));                      \
  if (!hps_p_##f) {                                                              \
    snprintf(load_err, sizeof load_err, "libcuda.so.1 has no %s", HPS_STR(f));   \
    return;                                                                      \
  }
  HPS_CU_FUNCS(HPS_CU_LOAD)
#undef HPS_CU_LOAD
}

int hps_cu_load(char *err, int errlen) {
  pthread_once(&once, load);
  if (load_err[0]) {
    snprintf(err, (size_t)errlen, "%s", load_err);
    return -1;
  }
  return 0;
}
