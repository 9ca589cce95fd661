package native

import (
	"fmt"
	"os"

	"golang.org/x/sys/cpu"
)

// ISA is the instruction set a CPU kernel variant uses.
type ISA int

// Instruction sets, numbered as hps_isa in heterps_kernels.h.
const (
	Scalar ISA = iota
	AVX2
	AVX512
)

var isaNames = [...]string{"scalar", "avx2", "avx512"}

func (i ISA) String() string {
	if i < 0 || int(i) >= len(isaNames) {
		return fmt.Sprintf("ISA(%d)", int(i))
	}
	return isaNames[i]
}

// ParseISA maps "scalar", "avx2" or "avx512" to an ISA.
func ParseISA(name string) (ISA, error) {
	for i, n := range isaNames {
		if n == name {
			return ISA(i), nil
		}
	}
	return 0, fmt.Errorf("unknown ISA %q (want scalar, avx2 or avx512)", name)
}

// Supported reports whether this CPU and OS can run the variant. x/sys/cpu
// already checks that the OS saves the wide registers (XSAVE/XCR0), and
// GODEBUG=cpu.avx512f=off turns a feature off to test the fallback.
func (i ISA) Supported() bool {
	switch i {
	case Scalar:
		return true
	case AVX2:
		return cpu.X86.HasAVX2 && cpu.X86.HasFMA
	case AVX512:
		return cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL
	}
	return false
}

// SupportedISAs lists the variants this machine can run, narrowest first.
func SupportedISAs() []ISA {
	var out []ISA
	for _, i := range []ISA{Scalar, AVX2, AVX512} {
		if i.Supported() {
			out = append(out, i)
		}
	}
	return out
}

// BestISA returns the ISA forced by HETERPS_ISA, or else the widest one
// supported. A forced ISA that the CPU lacks is an error, not a crash.
func BestISA() (ISA, error) {
	if name := os.Getenv("HETERPS_ISA"); name != "" {
		isa, err := ParseISA(name)
		if err != nil {
			return 0, fmt.Errorf("HETERPS_ISA: %w", err)
		}
		if !isa.Supported() {
			return 0, fmt.Errorf("HETERPS_ISA=%s: this CPU does not support it", name)
		}
		return isa, nil
	}
	all := SupportedISAs()
	return all[len(all)-1], nil
}
