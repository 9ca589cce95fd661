// cgo compiles only the .c files of a package's own folder: this one brings in kernels/cpu/act.c.
#include "../kernels/cpu/act.c"
