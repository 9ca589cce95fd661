package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/sched"
)

const exampleProblem = "../../config/examples/problems/two-types.toml"

func plan(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runPlan(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// writeProblem writes the example problem with one line replaced.
func writeProblem(t *testing.T, old, new string) string {
	t.Helper()
	src, err := os.ReadFile(exampleProblem)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte(old)) {
		t.Fatalf("example problem lacks %q", old)
	}
	path := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(path, bytes.Replace(src, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPlanJSONRecosts(t *testing.T) {
	code, out, errs := plan(t, "--problem", exampleProblem, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got sched.Plan
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Method != "exact" || !got.Feasible || got.PSType != "cpu" || len(got.Assign) != 2 || len(got.Stages) == 0 {
		t.Fatalf("%+v", got)
	}
	c, _ := config.LoadProblem(exampleProblem)
	p, _ := sched.NewProblem(c)
	cost, err := sched.Recost(&got, p)
	if err != nil || cost.Cost != got.Cost {
		t.Fatalf("recost %v (%v), printed %v", cost.Cost, err, got.Cost)
	}
}

func TestPlanTableShowsStagesAndRules(t *testing.T) {
	code, out, errs := plan(t, "--problem", exampleProblem, "--method", "heuristic")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"method heuristic", "stage", "cost share", "total", "100%", "breakpoints", "newton", "sta-ratio", "sta-ps-ratio"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanInfeasibleExitsThree(t *testing.T) {
	path := writeProblem(t, "throughput_limit = 50000", "throughput_limit = 5e9")
	code, out, errs := plan(t, "--problem", path, "--json")
	if code != exitInfeasible {
		t.Fatalf("exit %d, want %d: %s", code, exitInfeasible, errs)
	}
	var got sched.Plan
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Feasible || got.Reason == "" {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(errs, "infeasible") || !strings.Contains(errs, "limit") {
		t.Fatalf("stderr: %s", errs)
	}
}

func TestPlanBadFileExitsTwoWithLine(t *testing.T) {
	path := writeProblem(t, "alpha = [0.95, 0.9]", "alpha = [1.5, 0.9]")
	code, _, errs := plan(t, "--problem", path)
	if code != exitUsage || !strings.Contains(errs, "p.toml:29:1: layer[0].alpha") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, _, errs = plan(t, "--problem", filepath.Join(t.TempDir(), "missing.toml"))
	if code != exitUsage || !strings.Contains(errs, "missing.toml") {
		t.Fatalf("missing file: exit %d: %s", code, errs)
	}
}

func TestPlanUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--problem", exampleProblem, "--method", "nope"},
		{"--problem", exampleProblem, "--provision", "nope"},
		{"--problem", exampleProblem, "--method", "bf", "--max-plans", "1"},
		{"--model", "ctrdnn"},
		{"--model", "ctrdnn", "--catalog", "../../config/examples/catalogs/grid5000.toml", "--profile", "p.toml"},
	} {
		if code, _, errs := plan(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d: %s", args, code, errs)
		}
	}
}

func TestPlanCompareAndPlot(t *testing.T) {
	png := filepath.Join(t.TempDir(), "cmp.png")
	code, out, errs := plan(t, "--problem", exampleProblem, "--compare", "--plot", png, "--budget", "40")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, m := range sched.Methods() {
		if !strings.Contains(out, "\n"+m+" ") {
			t.Errorf("no row for %s:\n%s", m, out)
		}
	}
	if !strings.Contains(out, "vs best") || !strings.Contains(out, "1.0000") {
		t.Errorf("no relative costs:\n%s", out)
	}
	img, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(img, []byte("\x89PNG")) {
		t.Fatalf("plot: %v", err)
	}
	code, out, _ = plan(t, "--problem", exampleProblem, "--compare", "--json", "--budget", "40")
	var plans []sched.Plan
	if err := json.Unmarshal([]byte(out), &plans); err != nil || code != exitOK || len(plans) != len(sched.Methods()) {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
}

func TestPlanFromModelAndCatalog(t *testing.T) {
	saved := filepath.Join(t.TempDir(), "estimated.toml")
	code, out, errs := plan(t, "--model", "ctrdnn", "--catalog", "../../config/examples/catalogs/grid5000.toml", "--save-problem", saved)
	if code != exitOK || !strings.Contains(errs, "roofline estimates") || !strings.Contains(out, "method exact") {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	if _, err := config.LoadProblem(saved); err != nil {
		t.Fatalf("saved problem: %v", err)
	}
}

func TestDispatchRunsPlan(t *testing.T) {
	if code := dispatch([]string{"plan", "--problem", filepath.Join(t.TempDir(), "none.toml")}); code != exitUsage {
		t.Fatalf("exit %d", code)
	}
}

func TestPlanSavesAndReusesRLPolicies(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.json")
	code, _, errs := plan(t, "--problem", exampleProblem, "--method", "rl", "--budget", "256", "--save-policy", pol)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, out, errs := plan(t, "--problem", exampleProblem, "--method", "rl-rnn", "--load-policy", pol)
	if code != exitFailure || !strings.Contains(errs, "policy") {
		t.Fatalf("LSTM policy into rl-rnn: exit %d: %s %s", code, out, errs)
	}
	code, out, errs = plan(t, "--problem", exampleProblem, "--method", "rl", "--budget", "256", "--load-policy", pol, "--json")
	if code != exitOK {
		t.Fatalf("reuse: exit %d: %s", code, errs)
	}
	var got sched.Plan
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.PolicyCost <= 0 || got.BestSampledCost <= 0 || (got.Decision != sched.DecisionPolicy && got.Decision != sched.DecisionSampled) ||
		got.Cost != min(got.PolicyCost, got.BestSampledCost) {
		t.Fatalf("rl --json: policy_cost %v best_sampled_cost %v decision %q cost %v", got.PolicyCost, got.BestSampledCost, got.Decision, got.Cost)
	}
	code, out, _ = plan(t, "--problem", exampleProblem, "--method", "rl", "--budget", "256")
	if code != exitOK || !strings.Contains(out, "the policy's own decision costs") {
		t.Fatalf("rl text output lacks the policy's decision: %s", out)
	}
	if code, _, _ := plan(t, "--problem", exampleProblem, "--method", "exact", "--save-policy", pol); code != exitUsage {
		t.Fatalf("--save-policy with exact: exit %d", code)
	}
}

// TestPlanFreeResourcesPrintNoNaN: with every price 0 the cost shares and
// ratios are "-", not NaN.
func TestPlanFreeResourcesPrintNoNaN(t *testing.T) {
	path := writeProblem(t, "price = 0.04 ", "price = 0 ")
	src, _ := os.ReadFile(path)
	if err := os.WriteFile(path, bytes.Replace(src, []byte("price = 2.48"), []byte("price = 0"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--problem", path}, {"--problem", path, "--compare"}} {
		code, out, errs := plan(t, args...)
		if code != exitOK || strings.Contains(out, "NaN") || !strings.Contains(out, "  -") {
			t.Errorf("%v: exit %d, stdout %q (%s); want no NaN", args, code, out, errs)
		}
	}
}

func TestPlanRefusesProfileWithCatalog(t *testing.T) {
	code, _, errs := plan(t, "--model", "ctrdnn", "--profile", exampleProblem, "--catalog", "x.toml")
	if code != exitUsage || !strings.Contains(errs, "--profile and --catalog") {
		t.Fatalf("exit %d, stderr %q; want 2 saying the flags do not go together", code, errs)
	}
}

func TestPlanHelpNamesTheProfileArgument(t *testing.T) {
	_, _, errs := plan(t, "--help")
	if strings.Contains(errs, "-profile heterps profile") || !strings.Contains(errs, "-profile file") {
		t.Fatalf("--help shows %q", errs)
	}
}

// TestPlanTrainsAPolicyAndRefusesCorruptOnes: --train-policy writes a
// policy that --load-policy reads; a corrupt, truncated or wrong-shape file
// is refused with an error naming the file and what is wrong.
func TestPlanTrainsAPolicyAndRefusesCorruptOnes(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "pre.json")
	code, _, errs := plan(t, "--train-policy", pol, "--train-problems", "1", "--budget", "128", "--seed", "3")
	if code != exitOK {
		t.Fatalf("--train-policy: exit %d: %s", code, errs)
	}
	if code, _, errs := plan(t, "--problem", exampleProblem, "--method", "rl", "--budget", "256", "--load-policy", pol); code != exitOK {
		t.Fatalf("--load-policy of the trained policy: exit %d: %s", code, errs)
	}
	good, err := os.ReadFile(pol)
	if err != nil {
		t.Fatal(err)
	}
	var short map[string]any
	if err := json.Unmarshal(good, &short); err != nil {
		t.Fatal(err)
	}
	short["b"] = []float32{1, 2}
	wrongShape, _ := json.Marshal(short)
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"truncated": {good[:len(good)/3], "truncated"},
		"corrupt":   {[]byte("\x00\x01 not json"), "not a policy file"},
		"shape":     {wrongShape, `"b" has 2 values`},
	} {
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errs := plan(t, "--problem", exampleProblem, "--method", "rl", "--load-policy", path)
		if code != exitUsage || !strings.Contains(errs, path) || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d: %s, want the file named and %q", name, code, errs, c.want)
		}
	}
	if code, _, _ := plan(t, "--train-policy", pol, "--problem", exampleProblem); code != exitUsage {
		t.Errorf("--train-policy with --problem: exit %d", code)
	}
}

// TestLoadPolicyRefusesWhatIsNotARegularFile: --load-policy on a FIFO or a
// device returns at once naming the path, instead of blocking or reading
// without end.
func TestLoadPolicyRefusesWhatIsNotARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "policy.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		code, _, errs := plan(t, "--problem", exampleProblem, "--method", "rl", "--load-policy", path)
		if code != exitUsage || !strings.Contains(errs, path) || !strings.Contains(errs, "not a regular file") {
			t.Errorf("%s: exit %d: %s", path, code, errs)
		}
	}
}

// TestPlanJSONSaysWhereLayerTimesCameFrom: `heterps plan --json` carries
// sources, per type: given for --problem, estimated for --model
// --catalog, and for --profile measured but for the types the profile's
// header says it estimated; the fields outside checks read are all there.
func TestPlanJSONSaysWhereLayerTimesCameFrom(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "p.toml")
	f, err := parseProfileFlags([]string{"--model", "mlp-digits", "--catalog", "local", "--type", "cpu-1t",
		"--batch", "64", "--reps", "1", "--units", "1", "--sync-steps", "0", "--out", prof}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want map[string]string
	}{
		{[]string{"--problem", exampleProblem}, map[string]string{"cpu": "given", "v100": "given"}},
		{[]string{"--model", "mlp-digits", "--catalog", "local"}, map[string]string{"cpu-1t": "estimated", "cpu-2t": "estimated"}},
		{[]string{"--model", "mlp-digits", "--profile", prof}, map[string]string{"cpu-1t": "measured", "cpu-2t": "estimated"}},
	} {
		code, out, errs := plan(t, append(c.args, "--json")...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &fields); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"method", "feasible", "cost", "throughput", "time_s", "assign", "stages", "ps_cores", "sched_seconds", "sources"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("%v: no %q in %s", c.args, k, out)
			}
		}
		var got sched.Plan
		json.Unmarshal([]byte(out), &got)
		if !maps.Equal(got.Sources, c.want) {
			t.Errorf("%v: sources %v, want %v", c.args, got.Sources, c.want)
		}
	}
	if _, out, _ := plan(t, "--model", "mlp-digits", "--profile", prof); !strings.Contains(out, "layer times: measured on cpu-1t; estimated (roofline) on cpu-2t") {
		t.Errorf("the table does not say which types were measured:\n%s", out)
	}
	// A profile that folded a dense sync in names it, in the JSON and the text.
	synced := filepath.Join(t.TempDir(), "synced.toml")
	f, err = parseProfileFlags([]string{"--model", "ctrdnn", "--catalog", "local", "--type", "cpu-1t", "--batch", "64", "--reps", "1",
		"--units", "1,2", "--sync-steps", "2", "--sync-rounds", "1", "--dense-sync", "allreduce", "--out", synced}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := profile(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	_, out, _ := plan(t, "--model", "ctrdnn", "--profile", synced, "--json")
	var got sched.Plan
	if err := json.Unmarshal([]byte(out), &got); err != nil || !maps.Equal(got.DenseSync, map[string]string{"cpu-1t": "allreduce"}) {
		t.Errorf("plan --json's dense_sync %v (%v), want cpu-1t: allreduce", got.DenseSync, err)
	}
	if _, out, _ := plan(t, "--model", "ctrdnn", "--profile", synced); !strings.Contains(out, "measured on cpu-1t (allreduce sync)") {
		t.Errorf("the table does not say the measured type's sync:\n%s", out)
	}
}
