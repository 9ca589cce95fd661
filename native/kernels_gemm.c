// cgo compiles only the .c files of a package's own folder: this one brings in kernels/cpu/gemm.c.
#include "../kernels/cpu/gemm.c"
