// cgo compiles only the .c files of a package's own folder: this one brings in kernels/cpu/lstm.c.
#include "../kernels/cpu/lstm.c"
