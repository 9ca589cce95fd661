package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
)

func TestProfileWritesAMeasuredProblemFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "p.toml")
	f, err := parseProfileFlags([]string{"--model", "mlp-digits", "--catalog", "../../config/examples/catalogs/local.toml",
		"--batch", "64", "--reps", "2", "--units", "1", "--sync-steps", "0", "--out", out}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if err := profile(context.Background(), f, &bytes.Buffer{}, &stderr); err != nil {
		t.Fatal(err)
	}
	p, err := config.LoadProblem(out)
	if err != nil {
		t.Fatalf("profile output does not load as a problem: %v", err)
	}
	if len(p.Layers) != 4 || p.ProfileBatch != 64 || p.Types[0].Name != "cpu-1t" {
		t.Fatalf("unexpected problem %+v", p)
	}
	for _, l := range p.Layers {
		if l.OCT[0] <= 0 || l.ODT[0] <= 0 || l.Beta[0] < 0 || l.Beta[0] > 1 {
			t.Errorf("layer %s: measured oct %g odt %g beta %g", l.Name, l.OCT[0], l.ODT[0], l.Beta[0])
		}
	}
	if !strings.Contains(stderr.String(), "measured type cpu-1t") {
		t.Errorf("no measurement table: %q", stderr.String())
	}
	if src := mustRead(t, out); !strings.Contains(src, "not measured: cpu-2t") {
		t.Errorf("estimated types are not marked:\n%s", src)
	}
}

func TestProfileRejectsUnknownTypeAndBadUnits(t *testing.T) {
	for _, tc := range []struct{ units, want string }{
		{"2,3", "--units [2 3]: must include 1"},
		{"1,0", `--units: "0": want a unit count in 1..256`},
		{"1,x", `--units: "x": want a unit count`},
		// k units run k replica processes here: 10^12 (or 5,000 on a big
		// enough batch) would have started them until the machine gave out.
		{"1,1000000000000", `--units: "1000000000000": want a unit count in 1..256`},
		{"1,257", `--units: "257": want a unit count in 1..256`},
	} {
		if _, err := parseProfileFlags([]string{"--units", tc.units}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--units %s: %v, want %q", tc.units, err, tc.want)
		}
	}
	if _, err := parseProfileFlags([]string{"--units", "1,256"}, &bytes.Buffer{}); err != nil {
		t.Errorf("--units 1,256: %v", err)
	}
	f, _ := parseProfileFlags([]string{"--type", "tpu", "--catalog", "../../config/examples/catalogs/local.toml"}, &bytes.Buffer{})
	if err := profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `no type "tpu"`) {
		t.Errorf("unknown type: %v", err)
	}
}

// TestProfileRefusesABatchBeyondTheMachinesMemory: the layers are timed
// on the whole model at B_o in one process, so a B_o whose step cannot fit
// the memory available is refused before anything is allocated (it died
// in Go's out-of-memory trace), as heterps train refuses it.
func TestProfileRefusesABatchBeyondTheMachinesMemory(t *testing.T) {
	f, err := parseProfileFlags([]string{"--model", "ctrdnn", "--batch", "100000000", "--units", "1"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	err = profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{})
	var usage usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--batch 100000000: model ctrdnn needs about") {
		t.Errorf("profile at B_o 10^8: %v, want a usage error naming the bytes", err)
	}
}

// TestProfileRefusesAUnitWiderThanTheMachine: --unit-threads above the
// CPU count used to skip every unit count and then index the empty
// timings (a panic).
func TestProfileRefusesAUnitWiderThanTheMachine(t *testing.T) {
	wide := strconv.Itoa(runtime.NumCPU() + 1)
	_, err := parseProfileFlags([]string{"--unit-threads", wide}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--unit-threads "+wide) {
		t.Errorf("--unit-threads %s on %d CPUs: %v", wide, runtime.NumCPU(), err)
	}
	if _, err := parseProfileFlags([]string{"--unit-threads", strconv.Itoa(runtime.NumCPU())}, &bytes.Buffer{}); err != nil {
		t.Errorf("a unit as wide as the machine refused: %v", err)
	}
}

func TestAmdahlAlphaFit(t *testing.T) {
	for _, c := range []struct {
		t1, tk float64
		k      int
		want   float64
	}{{1, 0.5, 2, 1}, {1, 1, 2, 0}, {1, 0.75, 2, 0.5}, {1, 1.2, 2, 0}, {1, 0.25, 4, 1}} {
		if got := amdahlAlpha(c.t1, c.tk, c.k); got != c.want {
			t.Errorf("amdahlAlpha(%g, %g, %d) = %g, want %g", c.t1, c.tk, c.k, got, c.want)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPlanReadsAProfileOfTheModel(t *testing.T) {
	out := filepath.Join(t.TempDir(), "p.toml")
	f, err := parseProfileFlags([]string{"--model", "mlp-digits", "--catalog", "../../config/examples/catalogs/local.toml",
		"--batch", "64", "--reps", "1", "--units", "1", "--sync-steps", "0", "--out", out}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if code, stdout, errs := plan(t, "--model", "mlp-digits", "--profile", out, "--json"); code != exitOK || !strings.Contains(stdout, `"feasible": true`) {
		t.Fatalf("plan --profile: exit %d\n%s\n%s", code, stdout, errs)
	}
	if code, _, errs := plan(t, "--model", "ctrdnn", "--profile", out); code != exitUsage || !strings.Contains(errs, "has 4 layers, model ctrdnn has 7") {
		t.Fatalf("profile of another model: exit %d: %s", code, errs)
	}
}

// TestProfileIntoKeepsTheTypesMeasuredBefore: profiling a second type
// --into the first's file keeps the first type's measured columns and
// header, and marks neither type as estimated.
func TestProfileIntoKeepsTheTypesMeasuredBefore(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "1t.toml"), filepath.Join(dir, "both.toml")
	run := func(args ...string) {
		t.Helper()
		f, err := parseProfileFlags(append([]string{"--model", "mlp-digits", "--catalog", "../../config/examples/catalogs/local.toml",
			"--batch", "64", "--reps", "1", "--units", "1", "--sync-steps", "0"}, args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if err := profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	}
	run("--type", "cpu-1t", "--out", first)
	run("--type", "cpu-2t", "--unit-threads", "2", "--into", first, "--out", second)
	a, err := config.LoadProblem(first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.LoadProblem(second)
	if err != nil {
		t.Fatal(err)
	}
	for l := range a.Layers {
		if a.Layers[l].OCT[0] != b.Layers[l].OCT[0] || a.Layers[l].ODT[0] != b.Layers[l].ODT[0] {
			t.Errorf("layer %d: cpu-1t oct/odt %g/%g became %g/%g", l, a.Layers[l].OCT[0], a.Layers[l].ODT[0], b.Layers[l].OCT[0], b.Layers[l].ODT[0])
		}
	}
	src := mustRead(t, second)
	if !strings.Contains(src, "# earlier: measured on this machine: cpu-1t ") || !strings.Contains(src, "# measured on this machine: cpu-2t ") ||
		strings.Contains(src, "not measured: cpu") {
		t.Errorf("header does not say both types were measured:\n%s", src)
	}
	if err := profile(context.Background(), &profileFlags{model: "ctrdnn", catalog: "local", batch: 64, reps: 1, units: []int{1}, unitThreads: 1,
		denseSync: "ps", syncRounds: 1, into: first}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "layers") {
		t.Errorf("--into a profile of another model: %v", err)
	}
}

// TestProfileSubmitStoresTheMeasuredTypes: `heterps profile --submit`
// sends, signed, the types it measured (this one and those --into kept)
// to the coordinator, which lists them per (model, type); the types the
// profile only estimated are not sent.
func TestProfileSubmitStoresTheMeasuredTypes(t *testing.T) {
	secret := "0123456789abcdef0123456789abcdef"
	url := startCoordinatorWith(t, []byte(secret))
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		f, err := parseProfileFlags(append([]string{"--model", "mlp-digits", "--catalog", "../../config/examples/catalogs/local.toml",
			"--batch", "64", "--reps", "1", "--units", "1", "--sync-steps", "0", "--submit", "--coordinator", url, "--secret-file", secretFile}, args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		if err := profile(context.Background(), f, &bytes.Buffer{}, &stderr); err != nil {
			t.Fatalf("profile --submit: %v\n%s", err, stderr.String())
		}
		return stderr.String()
	}
	first := filepath.Join(dir, "1t.toml")
	if out := run("--type", "cpu-1t", "--out", first); !strings.Contains(out, "stored model mlp-digits on type cpu-1t (4 layers at B_o = 64)") {
		t.Errorf("no word of the stored profile in:\n%s", out)
	}
	c, err := (&coordFlags{url: url, secretFile: secretFile}).client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	ps, err := c.profiles(context.Background())
	if err != nil || len(ps) != 1 || ps[0].Model != "mlp-digits" || ps[0].Type != "cpu-1t" || ps[0].Layers != 4 || ps[0].ProfileBatch != 64 {
		t.Fatalf("stored %+v (%v), want mlp-digits on cpu-1t only (cpu-2t was estimated)", ps, err)
	}
	run("--type", "cpu-2t", "--unit-threads", "2", "--into", first)
	if ps, err = c.profiles(context.Background()); err != nil || len(ps) != 2 || ps[0].Type != "cpu-1t" || ps[1].Type != "cpu-2t" {
		t.Fatalf("after --into: %+v (%v), want cpu-1t and cpu-2t", ps, err)
	}
	f, _ := parseProfileFlags([]string{"--model", "mlp-digits", "--catalog", "local", "--batch", "64", "--reps", "1", "--units", "1",
		"--sync-steps", "0", "--submit", "--coordinator", url}, &bytes.Buffer{})
	if err := profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("unsigned --submit: %v, want the coordinator's 401", err)
	}

	forget := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := runForgetProfiles(context.Background(), append(args, "--coordinator", url, "--secret-file", secretFile), &out, &errb); code != want {
			t.Fatalf("profile forget %v: exit %d, want %d: %s", args, code, want, errb.String())
		}
		return out.String() + errb.String()
	}
	if out := forget(exitOK, "mlp-digits", "cpu-2t"); !strings.Contains(out, "forgot the profiles of mlp-digits on cpu-2t") {
		t.Errorf("profile forget of one type: %s", out)
	}
	if ps, err = c.profiles(context.Background()); err != nil || len(ps) != 1 || ps[0].Type != "cpu-1t" {
		t.Errorf("after forgetting cpu-2t: %+v (%v)", ps, err)
	}
	forget(exitOK, "mlp-digits")
	if ps, err = c.profiles(context.Background()); err != nil || len(ps) != 0 {
		t.Errorf("after forgetting the model: %+v (%v)", ps, err)
	}
	if out := forget(exitFailure, "mlp-digits"); !strings.Contains(out, "404") {
		t.Errorf("forgetting what is not stored: %s", out)
	}
	if out := forget(exitUsage); !strings.Contains(out, "want MODEL") {
		t.Errorf("forget without a model: %s", out)
	}
}

// --device cuda profiles one GPU as one unit of a GPU type: unit threads
// are refused, and k units need synchronisation runs (k replicas, one GPU
// each), which are off unless asked for; a build without CUDA refuses the
// device (exit status 2) naming the build.
func TestProfileDeviceFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"--device", "gpu"}, {"--device", "cuda:x"}, {"--device", "cuda:-1"},
		{"--device", "cuda", "--units", "1,2"}, {"--device", "cuda", "--units", "1,2", "--sync-steps", "0"},
		{"--device", "cuda:1", "--unit-threads", "2"},
	} {
		if _, err := parseProfileFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	multi, err := parseProfileFlags([]string{"--device", "cuda:2", "--units", "1,2", "--sync-steps", "5"}, &bytes.Buffer{})
	if err != nil || !slices.Equal(multi.units, []int{1, 2}) || multi.syncSteps != 5 {
		t.Errorf("--device cuda:2 --units 1,2 --sync-steps 5: %+v, %v; want units [1 2] and 5 sync steps", multi, err)
	}
	f, err := parseProfileFlags([]string{"--device", "cuda:1", "--catalog", "cloud"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !f.device.cuda || f.device.gpu != 1 || !slices.Equal(f.units, []int{1}) || f.syncSteps != 0 {
		t.Errorf("--device cuda:1: device %v, units %v, sync steps %d; want GPU 1, units [1], no sync run", f.device, f.units, f.syncSteps)
	}
	err = profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{})
	if cudaBuild {
		t.Skip("a CUDA build: the GPU path needs a GPU (bench/gpu/run.sh)")
	}
	var usage usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "built without CUDA") || !strings.Contains(err.Error(), "cuda:1") {
		t.Errorf("--device cuda:1 in a build without CUDA: %v (want a usage error naming the device and the build)", err)
	}
}

// The type a profile files its times under is of the device's kind: a
// GPU's times never go under a CPU type nor a CPU's under a GPU type,
// unless the catalog emulates GPU types on CPU nodes.
func TestProfileTypeMatchesTheDevice(t *testing.T) {
	cloud, err := config.LoadCatalog("cloud")
	if err != nil {
		t.Fatal(err)
	}
	gpuType := cloud.Types[slices.IndexFunc(cloud.Types, func(ty config.CatalogType) bool { return ty.Kind == config.KindGPU })].Name
	cpuType := cloud.Types[slices.IndexFunc(cloud.Types, func(ty config.CatalogType) bool { return ty.Kind == config.KindCPU })].Name
	if col, err := measuredColumn(cloud, "", config.KindGPU); err != nil || cloud.Types[col].Name != gpuType {
		t.Errorf("default GPU type: %v, %v; want %s", col, err, gpuType)
	}
	if _, err := measuredColumn(cloud, gpuType, config.KindCPU); err == nil || !strings.Contains(err.Error(), "gpu type") {
		t.Errorf("CPU times under GPU type %s: %v", gpuType, err)
	}
	if _, err := measuredColumn(cloud, cpuType, config.KindGPU); err == nil || !strings.Contains(err.Error(), "cpu type") {
		t.Errorf("GPU times under CPU type %s: %v", cpuType, err)
	}
	cloud.EmulateGPUs = true
	if col, err := measuredColumn(cloud, gpuType, config.KindCPU); err != nil || cloud.Types[col].Name != gpuType {
		t.Errorf("emulated GPU type measured on the CPU: %v, %v", col, err)
	}
}
