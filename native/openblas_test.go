package native

import (
	"os"
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
