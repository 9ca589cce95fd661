/* The row-prefetching switch (heterps_kernels.h; rows.h uses it). */
#include "rows.h"

static int row_prefetch = 1;

void hps_set_row_prefetch(int on) { row_prefetch = on != 0; }

int hps_row_prefetch_on(void) { return row_prefetch; }
