package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/alloc"
)

// writeTrace writes a trace of steps steps of an exponential loss curve,
// one step taking c/units seconds.
func writeTrace(t *testing.T, path string, steps int, c float64, units int) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for k := 1; k <= steps; k++ {
		l := alloc.TraceLine{T: float64(k) * c / float64(units), Step: int64(k), Loss: 2*math.Exp(-float64(k)/200) + 0.5,
			Units: units, StepSeconds: c / float64(units)}
		if err := enc.Encode(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSimReplaysTraces: with arrivals.json the simulator runs exactly the
// jobs it lists on the traces' curves and step costs: one job of 1000
// steps of 1 s on one core takes 1000 s.
func TestSimReplaysTraces(t *testing.T) {
	dir := t.TempDir()
	writeTrace(t, filepath.Join(dir, "a.jsonl"), 1000, 1, 1)
	writeTrace(t, filepath.Join(dir, "b.jsonl"), 500, 2, 2)
	if err := os.WriteFile(filepath.Join(dir, arrivalsFile), []byte(`[{"trace":"a.jsonl","arrival":0,"priority":1}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	v := simJSON(t, "--trace-dir", dir, "--cores", "1", "--epoch", "5", "--policy", "fair")
	if v["jobs"] != 1.0 {
		t.Errorf("jobs %v, want the schedule's 1", v["jobs"])
	}
	if m := v["makespan_s"].(float64); math.Abs(m-1000) > 1 {
		t.Errorf("makespan %v s, want 1000 (1000 steps of 1 s)", m)
	}
	// Without a schedule, the traces are kinds drawn for Poisson arrivals.
	if err := os.Remove(filepath.Join(dir, arrivalsFile)); err != nil {
		t.Fatal(err)
	}
	v = simJSON(t, "--trace-dir", dir, "--jobs", "6", "--cores", "8", "--policy", "quality")
	if v["jobs"] != 6.0 || !(v["avg_quality"].(float64) > 0) {
		t.Errorf("drawn from traces: %v", v)
	}
	var out, errOut bytes.Buffer
	if code := runSim([]string{"--trace-dir", dir, "--jobs", "3"}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "traces in "+dir) {
		t.Errorf("exit %d, table %q (%s)", code, out.String(), errOut.String())
	}
}

func TestSimRefusesBadTraceDirs(t *testing.T) {
	empty := t.TempDir()
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "x.jsonl"), []byte("{\"step\":1,\"loss\":1}\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := t.TempDir()
	writeTrace(t, filepath.Join(missing, "a.jsonl"), 100, 1, 1)
	if err := os.WriteFile(filepath.Join(missing, arrivalsFile), []byte(`[{"trace":"zz.jsonl","arrival":0}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{empty: "no *.jsonl", bad: "x.jsonl:2", missing: `no trace "zz.jsonl"`} {
		var out, errOut bytes.Buffer
		if code := runSim([]string{"--trace-dir", dir}, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), want) {
			t.Errorf("%s: exit %d, %q; want usage naming %s", dir, code, errOut.String(), want)
		}
	}
}
