package native

/*
char *openblas_get_corename(void);
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"syscall"
)

// OpenBLAS of a DYNAMIC_ARCH build picks its kernels for the CPU when the
// library loads. A release older than the CPU does not know its model and
// falls back to a generic core: Debian 12's 0.3.21 runs SSE3 "Prescott"
// kernels on Sapphire/Emerald Rapids Xeons, which makes every GEMM about 3×
// slower than its AVX-512 "SkylakeX" kernels on the same machine. The choice
// can only be overridden by OPENBLAS_CORETYPE before the library loads, so
// a program that finds a generic core on a CPU with AVX2 or AVX-512 runs
// itself again with the variable set (FixOpenBLASCore).

// OpenBLASCore is the name of the kernels OpenBLAS chose, e.g. "SkylakeX".
func OpenBLASCore() string { return C.GoString(C.openblas_get_corename()) }

// genericCores are the cores OpenBLAS falls back to for a CPU it does not
// know (the newest generic x86-64 targets of its DYNAMIC_ARCH builds).
var genericCores = []string{"Prescott", "Core2", "Penryn", "Nehalem", "Atom", "Katmai", "Coppermine", "Northwood", "Banias"}

// avx512Cores are the x86 cores whose kernels use AVX-512, avx2Cores
// those whose kernels use at least AVX2.
var (
	avx512Cores = []string{"SkylakeX", "Cooperlake", "SapphireRapids"}
	avx2Cores   = append([]string{"Haswell", "Zen", "Excavator"}, avx512Cores...)
)

// reexecMark is set in the environment of the run FixOpenBLASCore starts,
// so that it never loops.
const reexecMark = "HETERPS_OPENBLAS_REEXEC"

// OpenBLASCoreFor returns the core OPENBLAS_CORETYPE should name when
// OpenBLAS chose core on a CPU with the given ISAs, or "" to keep it.
func OpenBLASCoreFor(core string, avx512, avx2 bool) string {
	if !slices.Contains(genericCores, core) {
		return ""
	}
	switch {
	case avx512:
		return "SkylakeX"
	case avx2:
		return "Haswell"
	}
	return ""
}

// FixOpenBLASCore runs the program again (syscall.Exec of /proc/self/exe,
// same arguments, same PID) with OPENBLAS_CORETYPE set when OpenBLAS chose
// a generic core on a CPU with AVX2 or AVX-512; it returns only when there
// is nothing to fix, the user set OPENBLAS_CORETYPE, or the exec failed.
// Call it first in main.
func FixOpenBLASCore() {
	if os.Getenv("OPENBLAS_CORETYPE") != "" || os.Getenv(reexecMark) != "" {
		return
	}
	want := OpenBLASCoreFor(OpenBLASCore(), AVX512.Supported(), AVX2.Supported())
	if want == "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	env := append(os.Environ(), "OPENBLAS_CORETYPE="+want, reexecMark+"=1")
	syscall.Exec(exe, os.Args, env) // returns only on failure: go on with the slow kernels
}

// OpenBLASCoreAdvice returns a warning when the user's OPENBLAS_CORETYPE
// holds OpenBLAS to kernels narrower than this CPU runs — FixOpenBLASCore
// leaves a user's choice alone, and a setting made for another machine
// (or host-wide) halves GEMM speed unseen: on a Zen 5 VM with AVX-512,
// OPENBLAS_CORETYPE=Haswell ran ctrdnn's GEMMs at 105 GFLOP/s against
// 200 with the Cooperlake kernels OpenBLAS picks there, and heterps train
// 1.5x slower. It returns "" when there is nothing to say.
func OpenBLASCoreAdvice() string {
	if os.Getenv(reexecMark) != "" { // FixOpenBLASCore set it
		return ""
	}
	return coreAdvice(os.Getenv("OPENBLAS_CORETYPE"), OpenBLASCore(), AVX512.Supported(), AVX2.Supported())
}

// coreAdvice is OpenBLASCoreAdvice for a setting, the core it gave and the
// CPU's ISAs.
func coreAdvice(setting, core string, avx512, avx2 bool) string {
	if setting == "" {
		return ""
	}
	isa := ""
	switch {
	case avx512 && !slices.Contains(avx512Cores, core):
		isa = "AVX-512"
	case avx2 && !slices.Contains(avx2Cores, core):
		isa = "AVX2"
	default:
		return ""
	}
	return fmt.Sprintf("OPENBLAS_CORETYPE=%s holds OpenBLAS to its %s kernels on a CPU with %s: GEMMs may run at half speed; unset it to let OpenBLAS choose", setting, core, isa)
}
