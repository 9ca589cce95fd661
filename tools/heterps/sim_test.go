package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// simJSON runs `heterps sim ... --json` and decodes its one object.
func simJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := runSim(append(args, "--json"), &out, &errOut); code != exitOK {
		t.Fatalf("sim %v: exit %d: %s", args, code, errOut.String())
	}
	var v map[string]any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("sim %v: %v\n%s", args, err, out.String())
	}
	return v
}

// contended is a small case where jobs queue for cores.
var contended = []string{"--jobs", "30", "--cores", "32", "--arrival-mean", "15", "--seed", "1"}

func TestSimJSONContract(t *testing.T) {
	v := simJSON(t, append(contended, "--policy", "maxmin")...)
	if v["policy"] != "maxmin" || v["jobs"] != 30.0 || v["cores"] != 32.0 {
		t.Errorf("policy, jobs, cores = %v, %v, %v", v["policy"], v["jobs"], v["cores"])
	}
	for _, k := range []string{"avg_quality", "mean_time_to_90", "mean_time_to_95", "makespan_s", "decision_ms_max"} {
		x, ok := v[k].(float64)
		if !ok || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			t.Errorf("%s = %v, want a finite non-negative number", k, v[k])
		}
	}
	if q := v["avg_quality"].(float64); q <= 0 || q > 1 {
		t.Errorf("avg_quality %v outside (0, 1]", q)
	}
	if v["mean_time_to_95"].(float64) < v["mean_time_to_90"].(float64) {
		t.Errorf("95 %% reached before 90 %%: %v < %v", v["mean_time_to_95"], v["mean_time_to_90"])
	}
	t.Logf("decision_ms_max %v, fit_ms_max %v", v["decision_ms_max"], v["fit_ms_max"])
}

func TestSimIsDeterministicPerSeed(t *testing.T) {
	run := func(seed string) map[string]any {
		v := simJSON(t, "--jobs", "20", "--cores", "16", "--seed", seed, "--policy", "quality")
		delete(v, "decision_ms_max") // wall clock
		delete(v, "fit_ms_max")
		return v
	}
	a, b, c := run("7"), run("7"), run("8")
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	jc, _ := json.Marshal(c)
	if !bytes.Equal(ja, jb) {
		t.Errorf("same seed, different results:\n%s\n%s", ja, jb)
	}
	if bytes.Equal(ja, jc) {
		t.Errorf("seeds 7 and 8 gave the same result: %s", ja)
	}
}

func TestSimQualityBeatsFairOnAverageQuality(t *testing.T) {
	q := simJSON(t, append(contended, "--policy", "quality")...)["avg_quality"].(float64)
	f := simJSON(t, append(contended, "--policy", "fair")...)["avg_quality"].(float64)
	if q <= f {
		t.Errorf("avg_quality: quality %.4f, fair %.4f; want quality higher", q, f)
	}
}

func TestSimComparesEveryPolicy(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runSim([]string{"--jobs", "8", "--cores", "8", "--policy", "all"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"vs fair", "quality-per-cost", "maxmin", "priority", "fair"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSimRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--cores", "10001"}, {"--cores", "0"}, {"--jobs", "0"}, {"--jobs", "100001"}, {"--arrival-mean", "0"},
		{"--epoch", "-1"}, {"--policy", "best"}, {"extra"},
	} {
		var out, errOut bytes.Buffer
		if code := runSim(args, &out, &errOut); code != exitUsage {
			t.Errorf("sim %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
