package native

import (
	"os"
	"strings"
	"testing"
)

func TestOpenBLASCoreFor(t *testing.T) {
	for _, tc := range []struct {
		core         string
		avx512, avx2 bool
		want         string
	}{
		{"Prescott", true, true, "SkylakeX"},
		{"Prescott", false, true, "Haswell"},
		{"Prescott", false, false, ""},
		{"Nehalem", true, true, "SkylakeX"},
		{"SkylakeX", true, true, ""},
		{"Zen", false, true, ""},
		{"Haswell", true, true, ""},
	} {
		if got := OpenBLASCoreFor(tc.core, tc.avx512, tc.avx2); got != tc.want {
			t.Errorf("OpenBLASCoreFor(%q, avx512 %t, avx2 %t) = %q, want %q", tc.core, tc.avx512, tc.avx2, got, tc.want)
		}
	}
}

// TestCoreAdvice: a user's OPENBLAS_CORETYPE that keeps OpenBLAS below the
// CPU's widest ISA gets a warning naming the setting and the ISA; a
// setting at the CPU's width, or none, gets nothing.
func TestCoreAdvice(t *testing.T) {
	for _, tc := range []struct {
		setting, core string
		avx512, avx2  bool
		wantISA       string // "" = no advice
	}{
		{"Haswell", "Haswell", true, true, "AVX-512"},
		{"Zen", "Zen", true, true, "AVX-512"},
		{"Prescott", "Prescott", false, true, "AVX2"},
		{"Sandybridge", "Sandybridge", true, true, "AVX-512"},
		{"SkylakeX", "SkylakeX", true, true, ""},
		{"Cooperlake", "Cooperlake", true, true, ""},
		{"Haswell", "Haswell", false, true, ""},
		{"Zen", "Zen", false, true, ""},
		{"Prescott", "Prescott", false, false, ""},
		{"", "Haswell", true, true, ""}, // OpenBLAS's own choice: FixOpenBLASCore's business
	} {
		got := coreAdvice(tc.setting, tc.core, tc.avx512, tc.avx2)
		switch {
		case tc.wantISA == "" && got != "":
			t.Errorf("coreAdvice(%q, %q, %t, %t) = %q, want none", tc.setting, tc.core, tc.avx512, tc.avx2, got)
		case tc.wantISA != "" && !(strings.Contains(got, "OPENBLAS_CORETYPE="+tc.setting) && strings.Contains(got, "with "+tc.wantISA+":")):
			t.Errorf("coreAdvice(%q, %q, %t, %t) = %q, want it to name the setting and %s", tc.setting, tc.core, tc.avx512, tc.avx2, got, tc.wantISA)
		}
	}
}

// TestOpenBLASCoreFollowsTheEnvironment: the library reports the core it
// runs; with OPENBLAS_CORETYPE set (as FixOpenBLASCore sets it) that core.
func TestOpenBLASCoreFollowsTheEnvironment(t *testing.T) {
	core := OpenBLASCore()
	if core == "" {
		t.Fatal("OpenBLAS reports no core")
	}
	if want := os.Getenv("OPENBLAS_CORETYPE"); want != "" && core != want {
		t.Errorf("OPENBLAS_CORETYPE=%s but OpenBLAS runs %s", want, core)
	}
	t.Logf("OpenBLAS core: %s", core)
}
