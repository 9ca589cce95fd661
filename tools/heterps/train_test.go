package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/native"
)

func trainCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := trainCommand(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

const criteoSample = "../../daemon/data/testdata/criteo_sample.csv"

func TestTrainJSONReportsTheRun(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "digits.safetensors")
	digits := "digits:../../daemon/data/testdata/digits.csv.gz"
	code, out, errs := trainCLI(t, "--model", "mlp-digits", "--data", digits, "--steps", "20",
		"--batch", "32", "--threads", "1", "--json", "--checkpoint", ck)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r trainResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Model != "mlp-digits" || r.Steps != 20 || r.Batch != 32 || r.Threads != 1 || r.Samples != 640 ||
		r.SamplesPerS <= 0 || r.Accuracy <= 0 || r.EvalSamples == 0 || r.Checkpoint != ck {
		t.Fatalf("unexpected result %+v", r)
	}
	if !strings.Contains(errs, "step 20/20") {
		t.Fatalf("no progress lines on a non-terminal: %q", errs)
	}
	// A second run resumes from the checkpoint and stops at the same total.
	code, out, errs = trainCLI(t, "--model", "mlp-digits", "--data", digits, "--steps", "30",
		"--batch", "32", "--threads", "1", "--json", "--checkpoint", ck)
	if code != exitOK {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	var r2 trainResult
	if err := json.Unmarshal([]byte(out), &r2); err != nil || r2.ResumedFrom != 20 || r2.Steps != 30 || r2.Samples != 320 {
		t.Fatalf("resume: %+v (%v)", r2, err)
	}
}

func TestTrainStopsAtMalformedLineWithStatus2(t *testing.T) {
	src, err := os.ReadFile(criteoSample)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	lines[5] = strings.Replace(lines[5], "05db9164", "zz", 1) + ",extra"
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := trainCLI(t, "--data", "criteo:"+bad, "--steps", "5", "--batch", "16", "--threads", "1", "--eval-samples", "0")
	if code != exitUsage || !strings.Contains(errs, "bad.csv:6") {
		t.Fatalf("exit %d, stderr %q; want 2 and the file:line", code, errs)
	}
	code, out, errs := trainCLI(t, "--data", "criteo:"+bad, "--steps", "5", "--batch", "16", "--threads", "1",
		"--eval-samples", "0", "--skip-bad-lines", "--json")
	var r trainResult
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.BadLines != 1 {
		t.Fatalf("skip mode: exit %d, %+v, %s", code, r, errs)
	}
}

func TestTrainRejectsBadFlagsAndModels(t *testing.T) {
	for _, args := range [][]string{
		{"--batch", "0"},
		{"--model", "resnet"},
		{"--data", "parquet:/x"},
		{"--isa", "sse9"},
		{"stray"},
		{"--threads", "1000000"},
	} {
		if code, _, errs := trainCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errs)
		}
	}
	if _, _, errs := trainCLI(t, "--threads", "513"); !strings.Contains(errs, "--threads 513: at most 512") {
		t.Errorf("--threads 513: %q, want the bound named", errs)
	}
}

// TestTrainRefusesDataTheModelCannotRead: ctrdnn (26 slots, 13 dense
// features) on Avazu (22 slots) stops before the first step with status 2.
func TestTrainRefusesDataTheModelCannotRead(t *testing.T) {
	avazu := strings.Replace(criteoSample, "criteo_sample.csv", "avazu_sample.csv", 1)
	code, _, errs := trainCLI(t, "--model", "ctrdnn", "--data", "avazu:"+avazu, "--steps", "2", "--batch", "8", "--threads", "1", "--eval-samples", "0")
	if code != exitUsage || !strings.Contains(errs, "reads 26 sparse slots; the data has 22") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// TestTrainErrorEndsTheCommand: a step that fails (nce needs target classes
// that synthetic data lacks) ends the command with its error while the
// reader goroutine is blocked handing over batches nobody will take.
func TestTrainErrorEndsTheCommand(t *testing.T) {
	type outcome struct {
		code int
		errs string
	}
	src, err := os.ReadFile("../../config/examples/models/linreg.toml")
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "diverging.toml") // a learning rate that makes the loss overflow in a few steps
	if err := os.WriteFile(model, []byte(strings.Replace(string(src), "lr = 0.01", "lr = 1e30", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan outcome, 1)
	go func() {
		code, _, errs := trainCLI(t, "--model", model, "--data", "synthetic", "--steps", "1000000", "--batch", "8",
			"--threads", "1", "--eval-samples", "0")
		done <- outcome{code, errs}
	}()
	select {
	case got := <-done:
		if got.code != exitFailure || !strings.Contains(got.errs, "diverged") {
			t.Fatalf("exit %d, stderr %q; want 1 and the step's error", got.code, got.errs)
		}
	case <-time.After(time.Minute):
		t.Fatal("heterps train did not return a minute after its first step failed")
	}
}

// TestTrainLinregOnRegressReportsFitAndOptimum: on the regress generator,
// linreg reports its held-out MSE and R² beside the generator's optimum,
// and no accuracy or AUC; on click labels, the fit without an optimum.
func TestTrainLinregOnRegressReportsFitAndOptimum(t *testing.T) {
	code, out, errs := trainCLI(t, "--model", "linreg", "--data", "regress:2", "--steps", "300", "--threads", "1", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(out), &fields); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, key := range []string{"mse", "r2", "optimal_mse", "optimal_r2"} {
		if _, ok := fields[key].(float64); !ok {
			t.Errorf("no number %q in %s", key, out)
		}
	}
	for _, key := range []string{"accuracy", "auc", "bayes_auc"} {
		if _, ok := fields[key]; ok {
			t.Errorf("%q in a regression's result: %s", key, out)
		}
	}
	var r trainResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Regression == nil || r.Optimum == nil {
		t.Fatalf("%v: %+v", err, r)
	}
	if r.OptimalMSE != 4 || r.MSE > 1.1*r.OptimalMSE || math.Abs(r.R2-r.OptimalR2) > 0.02 {
		t.Errorf("MSE %.4f (optimal %.4f), R² %.4f (optimal %.4f)", r.MSE, r.OptimalMSE, r.R2, r.OptimalR2)
	}

	code, out, errs = trainCLI(t, "--model", "linreg", "--data", "regress:2", "--steps", "30", "--threads", "1")
	if code != exitOK || !strings.Contains(out, "MSE ") || !strings.Contains(out, "(optimal 4.0000)") || !strings.Contains(out, "R² ") {
		t.Fatalf("exit %d, text output %q (%s)", code, out, errs)
	}

	code, out, errs = trainCLI(t, "--model", "linreg", "--data", "synthetic", "--steps", "30", "--threads", "1",
		"--eval-samples", "2000", "--json")
	fields = nil
	if code != exitOK || json.Unmarshal([]byte(out), &fields) != nil {
		t.Fatalf("linreg on synthetic: exit %d, %s (%s)", code, out, errs)
	}
	if _, ok := fields["mse"]; !ok || fields["optimal_mse"] != nil || fields["auc"] == nil {
		t.Errorf("linreg on click labels: want mse and auc, no optimal_mse: %s", out)
	}
}

const digitsData = "digits:../../daemon/data/testdata/digits.csv.gz"

// TestTrainLoopsOverEpochs: --steps beyond one pass over a file reads the
// file again and says so, instead of stopping when the file ends.
func TestTrainLoopsOverEpochs(t *testing.T) {
	code, out, errs := trainCLI(t, "--model", "mlp-digits", "--data", digitsData, "--steps", "40",
		"--batch", "128", "--threads", "1", "--eval-samples", "0", "--json")
	var r trainResult
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	// digits holds 1797 records, about 1600 in the training split: 13 batches of 128 a pass.
	if r.Steps != 40 || r.Epochs < 3 || !strings.Contains(errs, "\nepoch 2\n") || !strings.Contains(errs, "\nepoch 3\n") {
		t.Fatalf("steps %d, epochs %d, stderr %q; want 40 steps over at least 3 epochs, each announced", r.Steps, r.Epochs, errs)
	}
}

func TestTrainMissingDataFileExits2(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.csv")
	code, _, errs := trainCLI(t, "--data", "criteo:"+missing, "--steps", "2", "--threads", "1", "--eval-samples", "0")
	if code != exitUsage || !strings.Contains(errs, "absent.csv") {
		t.Fatalf("exit %d, stderr %q; want 2 naming the file", code, errs)
	}
}

// TestTrainInterruptedWritesItsCheckpoint: a run stopped by a signal (its
// context ended) exits 130, writes the checkpoint of the step it reached
// and says which, and the same command resumes from that step; without
// --checkpoint it says that nothing was saved.
func TestTrainInterruptedWritesItsCheckpoint(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "r.safetensors")
	args := []string{"--model", "linreg", "--data", "regress:1", "--batch", "8", "--threads", "1", "--eval-samples", "0"}
	interrupt := func(extra ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		var out, errb bytes.Buffer
		code := trainCommand(ctx, append(append(args, "--steps", "100000000"), extra...), &out, &errb)
		return code, errb.String()
	}
	code, errs := interrupt("--checkpoint", ck)
	var step int
	if _, err := fmt.Sscanf(errs[strings.LastIndex(errs, "interrupted at step"):], "interrupted at step %d", &step); err != nil || code != exitInterrupt ||
		step == 0 || !strings.Contains(errs, fmt.Sprintf("checkpoint of step %d written to %s", step, ck)) {
		t.Fatalf("interrupted: exit %d (want %d), stderr %q; want the step reached and its checkpoint", code, exitInterrupt, errs)
	}
	code, _, errs = trainCLI(t, append(args, "--steps", fmt.Sprint(step+3), "--checkpoint", ck)...)
	if code != exitOK || !strings.Contains(errs, fmt.Sprintf("resumed from step %d", step)) {
		t.Fatalf("resume: exit %d, stderr %q; want it to go on from step %d", code, errs, step)
	}
	if code, errs = interrupt(); code != exitInterrupt || !strings.Contains(errs, "nothing saved (no --checkpoint)") {
		t.Fatalf("interrupted without --checkpoint: exit %d, stderr %q", code, errs)
	}
}

// TestTrainCheckpointMustBeAFile: --checkpoint naming a named pipe exits 2
// at once, naming it, instead of waiting on the pipe for a writer.
func TestTrainCheckpointMustBeAFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ck.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := trainCLI(t, "--model", "linreg", "--data", "regress:1", "--steps", "2", "--batch", "8",
		"--eval-samples", "0", "--checkpoint", fifo)
	if code != exitUsage || !strings.Contains(errs, fifo) || !strings.Contains(errs, "a named pipe") {
		t.Fatalf("exit %d, stderr %q; want 2 naming the pipe", code, errs)
	}
}

// TestTrainResumeChecks: resuming says so; another model's checkpoint and a
// changed --batch are refused with status 2; fewer steps than the
// checkpoint trains nothing and prints no made-up loss.
func TestTrainResumeChecks(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "d.safetensors")
	base := []string{"--model", "mlp-digits", "--data", digitsData, "--threads", "1", "--eval-samples", "0", "--checkpoint", ck}
	if code, _, errs := trainCLI(t, append(base, "--steps", "5", "--batch", "16")...); code != exitOK {
		t.Fatalf("first run: exit %d: %s", code, errs)
	}
	code, _, errs := trainCLI(t, append(base, "--steps", "8", "--batch", "16")...)
	if code != exitOK || !strings.Contains(errs, "resumed from step 5") {
		t.Fatalf("resume: exit %d, stderr %q; want 0 and \"resumed from step 5\"", code, errs)
	}
	code, _, errs = trainCLI(t, append(base, "--steps", "12", "--batch", "32")...)
	if code != exitUsage || !strings.Contains(errs, "--batch 16") {
		t.Fatalf("changed batch: exit %d, stderr %q; want 2 naming --batch 16", code, errs)
	}
	code, out, errs := trainCLI(t, append(base, "--steps", "3", "--batch", "16")...)
	if code != exitOK || strings.Contains(out, "train loss 0.0000") || !strings.Contains(out, "no training steps run") ||
		!strings.Contains(errs, "checkpoint is at step 8") {
		t.Fatalf("fewer steps: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = trainCLI(t, "--model", "ctrdnn", "--data", "synthetic", "--steps", "2", "--batch", "16",
		"--threads", "1", "--eval-samples", "0", "--checkpoint", ck)
	if code != exitUsage || !strings.Contains(errs, "mlp-digits") {
		t.Fatalf("another model's checkpoint: exit %d, stderr %q; want 2", code, errs)
	}
}

// TestTrainResumedOnAFileEndsAsAnUninterruptedRun: a run on a data file
// stopped at step 7 and resumed to step 40 — twelve passes over the file,
// passed over without decoding — writes the same checkpoint, bit for bit,
// as a run of 40 steps without a stop; so does one on a generator, which
// jumps to the record the trained steps reached.
func TestTrainResumedOnAFileEndsAsAnUninterruptedRun(t *testing.T) {
	for _, spec := range []string{"criteo:../../daemon/data/testdata/criteo_sample.csv", "synthetic:1"} {
		dir := t.TempDir()
		args := func(steps int, ck string) []string {
			return []string{"--model", "ctrdnn", "--data", spec, "--batch", "64",
				"--threads", "1", "--eval-samples", "0", "--steps", fmt.Sprint(steps), "--checkpoint", filepath.Join(dir, ck)}
		}
		for _, run := range [][]string{args(40, "whole"), args(7, "resumed"), args(40, "resumed")} {
			if code, _, errs := trainCLI(t, run...); code != exitOK {
				t.Fatalf("%v: exit %d: %s", run, code, errs)
			}
		}
		whole, err := os.ReadFile(filepath.Join(dir, "whole"))
		if err != nil {
			t.Fatal(err)
		}
		resumed, err := os.ReadFile(filepath.Join(dir, "resumed"))
		if err != nil || !bytes.Equal(whole, resumed) {
			t.Errorf("%s: the resumed run's checkpoint differs from the uninterrupted run's (%v)", spec, err)
		}
	}
}

// TestTrainReadsAvazuAndLibsvm: the zoo's avazu model reads Avazu's 22
// slots, and a libsvm file's first N indices reach a model as dense
// features with "libsvm,dense=N:PATH".
func TestTrainReadsAvazuAndLibsvm(t *testing.T) {
	avazu := strings.Replace(criteoSample, "criteo_sample.csv", "avazu_sample.csv", 1)
	code, out, errs := trainCLI(t, "--model", "avazu", "--data", "avazu:"+avazu, "--steps", "5", "--batch", "16",
		"--threads", "1", "--eval-samples", "0", "--json")
	var r trainResult
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Steps != 5 {
		t.Fatalf("avazu: exit %d, %s %s", code, out, errs)
	}

	dir := t.TempDir()
	model := filepath.Join(dir, "svm.toml")
	if err := os.WriteFile(model, []byte(`version = 1
name = "svm"
task = "ctr"
[input]
dense = 3
slots = 1
vocab = 1000
[[layer]]
name = "emb"
kind = "embedding"
dim = 4
[[layer]]
name = "concat"
kind = "concat"
[[layer]]
name = "logit"
kind = "fc"
in = 7
out = 1
[loss]
kind = "bce"
[optimizer]
kind = "sgd"
lr = 0.1
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var svm strings.Builder
	for i := range 200 {
		fmt.Fprintf(&svm, "%d 1:%g 3:%g %d:1\n", i%2, float64(i%7)/7, float64(i%3), 4+i%50)
	}
	path := filepath.Join(dir, "d.svm")
	if err := os.WriteFile(path, []byte(svm.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = trainCLI(t, "--model", model, "--data", "libsvm,dense=3:"+path, "--steps", "5", "--batch", "16",
		"--threads", "1", "--eval-samples", "0")
	if code != exitOK {
		t.Fatalf("libsvm,dense=3: exit %d: %s", code, errs)
	}
	code, _, errs = trainCLI(t, "--model", model, "--data", "libsvm:"+path, "--steps", "5", "--batch", "16",
		"--threads", "1", "--eval-samples", "0")
	if code != exitUsage || !strings.Contains(errs, "dense") {
		t.Fatalf("libsvm without dense=3 for a model of 3 dense features: exit %d: %s", code, errs)
	}
}

// TestBinaryRunsOpenBLASOnItsCPUsKernels: the built heterps re-runs itself
// with OPENBLAS_CORETYPE when OpenBLAS fell back to a generic core on a
// CPU with AVX2 or AVX-512 (Debian's 0.3.21 on recent Xeons), so training
// runs the vector GEMM kernels.
func TestBinaryRunsOpenBLASOnItsCPUsKernels(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "heterps")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "train", "--model", "linreg", "--data", "regress:1", "--steps", "2", "--batch", "8", "--json")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, "OPENBLAS_CORETYPE=") || strings.HasPrefix(e, "HETERPS_OPENBLAS_REEXEC=")
	})
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("heterps train: %v\n%s", err, out)
	}
	var res trainResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	avx512, avx2 := native.AVX512.Supported(), native.AVX2.Supported()
	if fix := native.OpenBLASCoreFor(res.OpenBLAS, avx512, avx2); fix != "" {
		t.Errorf("heterps ran OpenBLAS core %q, a generic one: it should have run itself again with %s", res.OpenBLAS, fix)
	}
	if os.Getenv("OPENBLAS_CORETYPE") != "" {
		return // this binary's core is the variable's, not the one OpenBLAS picks by itself
	}
	loaded := native.OpenBLASCore() // this test binary does not fix its own
	want := native.OpenBLASCoreFor(loaded, avx512, avx2)
	if want == "" {
		want = loaded
	}
	if res.OpenBLAS != want {
		t.Errorf("heterps ran OpenBLAS core %q, want %q (this test binary loaded %q)", res.OpenBLAS, want, loaded)
	}
}

// TestTrainWarnsOfANarrowOpenBLASCore: with OPENBLAS_CORETYPE naming the
// core this binary runs, heterps train warns on stderr exactly when that
// core is narrower than the CPU (native.OpenBLASCoreAdvice), and says
// nothing once the variable is unset.
func TestTrainWarnsOfANarrowOpenBLASCore(t *testing.T) {
	args := []string{"--model", "linreg", "--data", "regress:1", "--steps", "2", "--batch", "8", "--eval-samples", "0"}
	t.Setenv("HETERPS_OPENBLAS_REEXEC", "")
	t.Setenv("OPENBLAS_CORETYPE", native.OpenBLASCore())
	advice := native.OpenBLASCoreAdvice()
	if code, _, errs := trainCLI(t, args...); code != exitOK || strings.Contains(errs, "warning:") != (advice != "") {
		t.Errorf("exit %d, want the warning %q on stderr iff it is not empty; stderr:\n%s", code, advice, errs)
	}
	os.Unsetenv("OPENBLAS_CORETYPE")
	if code, _, errs := trainCLI(t, args...); code != exitOK || strings.Contains(errs, "OPENBLAS_CORETYPE") {
		t.Errorf("exit %d with OPENBLAS_CORETYPE unset; stderr:\n%s", code, errs)
	}
	if advice == "" {
		t.Logf("OpenBLAS core %s is as wide as this CPU: no warning was due", native.OpenBLASCore())
	}
}

// TestTrainPrefetchKeepsTheBatchOrder: heterps train reads batches on
// another goroutine; its losses are those of a plain loop that reads each
// batch right before its step.
func TestTrainPrefetchKeepsTheBatchOrder(t *testing.T) {
	const steps = 12
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	code, _, errs := trainCLI(t, "--model", "linreg", "--data", "synthetic:4", "--steps", fmt.Sprint(steps), "--batch", "16",
		"--threads", "1", "--eval-samples", "0", "--trace", trace)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	raw, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for line := range strings.Lines(string(raw)) {
		var l struct{ Loss float64 }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		got = append(got, l.Loss)
	}
	cfg, err := config.LoadModel("linreg")
	if err != nil {
		t.Fatal(err)
	}
	be, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := nn.NewTrainer(be, cfg, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	src, err := data.Open("synthetic:4", data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var want []float64
	for range steps {
		b, err := src.Next(context.Background(), 16)
		if err != nil {
			t.Fatal(err)
		}
		loss, err := tr.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, loss)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("losses with prefetch %v\nwithout %v", got, want)
	}
}

// --device: cpu (the default), cuda (GPU 0) or cuda:N; anything else is a
// usage error, as is --isa with a GPU.
func TestTrainDeviceFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want device
	}{
		{nil, device{}},
		{[]string{"--device", "cpu"}, device{}},
		{[]string{"--device", "cuda"}, device{cuda: true}},
		{[]string{"--device", "cuda:3"}, device{cuda: true, gpu: 3}},
	} {
		f, err := parseTrainFlags(tc.args, io.Discard)
		if err != nil || f.device != tc.want {
			t.Errorf("%v: %+v, %v; want %+v", tc.args, f, err, tc.want)
		}
	}
	for _, bad := range [][]string{{"--device", "gpu"}, {"--device", "cuda:"}, {"--device", "cuda:-1"}, {"--device", "cuda1"},
		{"--device", "cuda:x"}, {"--device", "cuda:0", "--isa", "avx2"}} {
		if _, err := parseTrainFlags(bad, io.Discard); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// A build without CUDA refuses --device cuda with exit status 2 and says
// how to get a CUDA build, before reading any data.
func TestTrainOnCUDAWithoutCUDAExits2(t *testing.T) {
	if cudaBuild {
		t.Skip("a CUDA build: --device cuda needs a GPU (bench/gpu)")
	}
	if _, err := newCUDATrainBackend(0); !errors.Is(err, errNoCUDA) {
		t.Errorf("newCUDATrainBackend: %v, want errNoCUDA", err)
	}
	code, _, errs := trainCLI(t, "--device", "cuda:1", "--data", "criteo:/does/not/exist", "--steps", "1")
	if code != exitUsage || !strings.Contains(errs, "--device cuda:1: built without CUDA (make build-cuda / -tags cuda)") {
		t.Errorf("exit %d: %q", code, errs)
	}
}

// TestTrainRefusesARunBeyondTheMachinesMemory: a batch whose step needs
// more memory than the machine has available, or a model whose tables
// alone do, is refused before anything is allocated, with status 2 and
// the bytes needed and available; a run that fits, or one on a machine
// whose memory cannot be read, goes on.
func TestTrainRefusesARunBeyondTheMachinesMemory(t *testing.T) {
	// 10^8 rows of ctrdnn need over a TiB: no machine running the tests
	// has that available.
	code, _, errs := trainCLI(t, "--batch", "100000000", "--steps", "1", "--threads", "1")
	if code != exitUsage || !strings.Contains(errs, "--batch 100000000: model ctrdnn needs about") || !strings.Contains(errs, "lower --batch") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	tables, stage, err := nn.EstimateProcess(cfg, 512)
	if err != nil {
		t.Fatal(err)
	}
	has := func(n int64, ok bool) func() (int64, bool) { return func() (int64, bool) { return n, ok } }
	for _, c := range []struct {
		available func() (int64, bool)
		refused   string
	}{
		{has(tables+stage, true), ""},
		{has(tables+stage-1, true), "--batch 512: model ctrdnn needs about"},
		{has(tables-1, true), "model ctrdnn: its embedding and NCE tables need about"},
		{has(0, false), ""},
	} {
		err := checkHostMemory(cfg, 512, c.available)
		if c.refused == "" && err != nil || c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)) {
			have, _ := c.available()
			t.Errorf("%d bytes available: %v, want refused %q", have, err, c.refused)
		}
	}
}

// TestTrainWarnsOfMoreThreadsThanCPUs: --threads above the machine's CPUs
// trains, with a warning naming both counts; at the CPU count, none.
func TestTrainWarnsOfMoreThreadsThanCPUs(t *testing.T) {
	args := []string{"--model", "linreg", "--data", "regress:1", "--steps", "2", "--batch", "8", "--eval-samples", "0"}
	cpus := runtime.NumCPU()
	warning := fmt.Sprintf("--threads %d is more than this machine's %d CPUs", cpus+1, cpus)
	if code, _, errs := trainCLI(t, append(args, "--threads", strconv.Itoa(cpus+1))...); code != exitOK || !strings.Contains(errs, warning) {
		t.Errorf("exit %d, want the warning %q; stderr:\n%s", code, warning, errs)
	}
	if code, _, errs := trainCLI(t, append(args, "--threads", strconv.Itoa(cpus))...); code != exitOK || strings.Contains(errs, "CPUs:") {
		t.Errorf("exit %d at %d threads; stderr:\n%s", code, cpus, errs)
	}
}

// TestTrainOnAFIFOSkipsTheEvaluation: training on a FIFO evaluates
// nothing after it, and says why, instead of reading the writer's
// remaining bytes (mid-line) as the held-out split.
func TestTrainOnAFIFOSkipsTheEvaluation(t *testing.T) {
	src, err := os.ReadFile(criteoSample)
	if err != nil {
		t.Fatal(err)
	}
	head, rows, _ := strings.Cut(string(src), "\n")
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	written := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			written <- err
			return
		}
		_, err = io.WriteString(w, head+"\n"+strings.Repeat(rows, 50)) // ~10,000 records, more than the steps read
		written <- errors.Join(err, w.Close())
	}()
	code, out, errs := trainCLI(t, "--data", "criteo:"+fifo, "--steps", "5", "--batch", "64", "--threads", "1", "--json")
	var r trainResult
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Steps != 5 || r.EvalSamples != 0 || !strings.Contains(r.EvalSkipped, "FIFO") {
		t.Fatalf("exit %d, %+v, %s; want the run done and the evaluation skipped for the FIFO", code, r, errs)
	}
	<-written // the rest of its lines found no reader (EPIPE)
}

// TestTrainResumesWithSavedMarks: a run with --checkpoint saves its data
// file's record marks beside the checkpoint, and a run resuming from it in
// a process without marks takes them (and says so) instead of reading the
// file up to its data position.
func TestTrainResumesWithSavedMarks(t *testing.T) {
	t.Cleanup(data.ForgetMarks)
	src, err := os.ReadFile(criteoSample)
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(strings.TrimSpace(string(src)), "\n")
	var b strings.Builder
	b.WriteString(head + "\n")
	for range 700 { // 140,000 records: marks at 0, 65,536 and 131,072
		b.WriteString(body + "\n")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "criteo.csv")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "ck", "ctr.safetensors")
	if err := os.Mkdir(filepath.Dir(ck), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data", "criteo:" + file, "--batch", "512", "--threads", "2", "--eval-samples", "0", "--checkpoint", ck}
	if code, _, errs := trainCLI(t, append(args, "--steps", "260")...); code != exitOK { // 133,120 training records read
		t.Fatalf("exit %d: %s", code, errs)
	}
	if saved, _ := filepath.Glob(filepath.Join(dir, "ck", data.MarksDir, "*.json")); len(saved) != 1 {
		t.Fatalf("marks files beside the checkpoint: %v, want one", saved)
	}
	data.ForgetMarks() // the resuming run is another process
	code, _, errs := trainCLI(t, append(args, "--steps", "262")...)
	if code != exitOK || !strings.Contains(errs, "resumed from step 260") || !strings.Contains(errs, "data position found by 3 record marks") {
		t.Fatalf("exit %d: %s; want the resume to take the 3 saved marks", code, errs)
	}
}

// TestTrainPinsItsThreadsAsAsked: --pin always binds thread k to the k-th
// CPU and says so in the JSON; never leaves them free; an unknown policy
// and more threads than CPUs under always are usage errors.
func TestTrainPinsItsThreadsAsAsked(t *testing.T) {
	cpus, err := cpuset.Allowed()
	if err != nil || len(cpus) < 2 {
		t.Skipf("pinning needs 2 CPUs: %v, %v", cpus, err)
	}
	run := func(pin string, threads int) (int, trainResult, string) {
		code, out, errs := trainCLI(t, "--steps", "3", "--batch", "64", "--eval-samples", "0", "--json",
			"--threads", strconv.Itoa(threads), "--pin", pin)
		var r trainResult
		if code == exitOK {
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("--pin %s: %v\n%s", pin, err, out)
			}
		}
		return code, r, errs
	}
	if code, r, errs := run("always", 2); code != exitOK || !slices.Equal(r.PinnedCPUs, cpus[:2]) {
		t.Errorf("--pin always, 2 threads: exit %d, pinned to %v, want %v: %s", code, r.PinnedCPUs, cpus[:2], errs)
	}
	if code, r, errs := run("never", 2); code != exitOK || r.PinnedCPUs != nil {
		t.Errorf("--pin never: exit %d, pinned to %v: %s", code, r.PinnedCPUs, errs)
	}
	if code, _, errs := run("always", len(cpus)+1); code != exitUsage || !strings.Contains(errs, "pinning") {
		t.Errorf("--pin always, %d threads on %d CPUs: exit %d: %s", len(cpus)+1, len(cpus), code, errs)
	}
	if code, _, errs := run("sometimes", 1); code != exitUsage || !strings.Contains(errs, "never, auto or always") {
		t.Errorf("--pin sometimes: exit %d: %s", code, errs)
	}
}

// TestTrainRefusesCPUFlagsOnAGPU: --pin and --isa with --device cuda are
// usage errors naming the flag, before any device is opened.
func TestTrainRefusesCPUFlagsOnAGPU(t *testing.T) {
	for flag, value := range map[string]string{"--pin": "always", "--isa": "avx2"} {
		code, _, errs := trainCLI(t, "--device", "cuda", flag, value, "--steps", "1")
		if code != exitUsage || !strings.Contains(errs, flag+" "+value+" is for --device cpu") {
			t.Errorf("--device cuda %s %s: exit %d: %s", flag, value, code, errs)
		}
	}
}

// TestTrainWithoutEvaluationSaysSo: --eval-samples 0 reports that nothing
// was evaluated and why, not a held-out loss of 0 over 0 samples.
func TestTrainWithoutEvaluationSaysSo(t *testing.T) {
	code, out, errs := trainCLI(t, "--steps", "2", "--batch", "32", "--threads", "1", "--eval-samples", "0")
	if code != exitOK || !strings.Contains(out, "held-out: not evaluated: --eval-samples 0") || strings.Contains(out, "held-out: 0 samples") {
		t.Fatalf("exit %d:\n%s%s", code, out, errs)
	}
}
