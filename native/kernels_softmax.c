// cgo compiles only the .c files of a package's own folder: this one brings in kernels/cpu/softmax.c.
#include "../kernels/cpu/softmax.c"
