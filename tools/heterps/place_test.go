package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/place"
)

func placeCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runPlace(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestPlaceJSONReportsEveryMethod: each method's step, search time and
// distance from the best; the best is 0 from itself; every group is placed.
func TestPlaceJSONReportsEveryMethod(t *testing.T) {
	code, out, errs := placeCmd(t, "--model", "ctrdnn", "--devices", "cpu-gpu", "--method", "single,expert,mincut,exact", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got placeJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Model != "ctrdnn" || got.Ops != 37 || len(got.Devices) != 2 || len(got.Methods) != 4 {
		t.Fatalf("%+v", got)
	}
	zero := false
	for _, m := range got.Methods {
		if m.StepSeconds <= 0 || m.FromBest < 0 || len(m.Placement) != got.Groups || m.Evaluated < 1 {
			t.Errorf("%+v", m)
		}
		zero = zero || m.FromBest == 0
	}
	if !zero {
		t.Error("no method is the best")
	}
	if exact := got.Methods[3]; exact.Method != "exact" || exact.FromBest != 0 {
		t.Errorf("exact is %+.3f from the best", exact.FromBest)
	}
}

func TestPlaceTextSkipsExactOnLargeGraphs(t *testing.T) {
	code, out, errs := placeCmd(t, "--model", "nmt-like", "--devices", "cpu-4gpu", "--method", "single,exact")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "skipped: too many placements") || !strings.Contains(out, "single") {
		t.Errorf("%s", out)
	}
}

func TestPlaceMeasuresTheLocalCPU(t *testing.T) {
	code, out, errs := placeCmd(t, "--model", "mlp-digits", "--devices", "local", "--method", "single", "--measure", "--reps", "1", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got placeJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Measured == 0 {
		t.Errorf("measured %d ops (%v)", got.Measured, err)
	}
	if got.MeasuredHow != place.MeasuredInStep || !(got.LinkLatency > 0) || !(got.LinkBandwidth > 0) {
		t.Errorf("measured %s, link %g s + %g B/s; want in-step times and a measured link", got.MeasuredHow, got.LinkLatency, got.LinkBandwidth)
	}
	if code, _, errs := placeCmd(t, "--devices", "cpu-gpu", "--measure"); code != exitUsage || !strings.Contains(errs, "no device marked local") {
		t.Errorf("--measure without a local device: exit %d, %s", code, errs)
	}
}

func TestPlaceBadInputsExitTwo(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "d.toml")
	if err := os.WriteFile(bad, []byte("[[device]]\nname = \"x\"\nkind = \"fpga\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--method", "bogus"}, "unknown method"},
		{[]string{"--model", "nope"}, "not in the zoo"},
		{[]string{"--devices", bad}, "d.toml:3:1: device[0].kind"},
		{[]string{"--batch", "0"}, "batch"},
	} {
		code, _, errs := placeCmd(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// TestPlaceOnTheDevicesOfAnInventoryFile: --inventory builds the devices
// from a node's inventory (here as GET /v1/nodes lists a node): the CPU and
// each GPU.
func TestPlaceOnTheDevicesOfAnInventoryFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.json")
	inv := `{"id": "n1", "name": "gpubox", "state": "alive", "cores": 8, "memory_bytes": 68719476736,
		"gpus": [{"name": "V100", "memory_bytes": 17179869184, "multiprocessors": 80}, {"name": "V100", "memory_bytes": 17179869184, "multiprocessors": 80}]}`
	if err := os.WriteFile(path, []byte(inv), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := placeCmd(t, "--model", "ctrdnn", "--inventory", path, "--method", "single,mincut", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got placeJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Join(got.Devices, ",") != "cpu0,gpu0,gpu1" {
		t.Errorf("devices %v, want the CPU and the two GPUs", got.Devices)
	}
	if code, _, errs := placeCmd(t, "--model", "ctrdnn", "--inventory", path, "--devices", "cpu-gpu"); code != exitUsage || !strings.Contains(errs, "one of --devices, --node and --inventory") {
		t.Errorf("--inventory with --devices: exit %d: %s", code, errs)
	}
}

// TestPlaceOnTheDevicesOfARegisteredNode: --node reads the inventory the
// node registered with the coordinator.
func TestPlaceOnTheDevicesOfARegisteredNode(t *testing.T) {
	url := startCoordinator(t)
	var reg api.RegisterResponse
	postJSON(t, url, "/v1/nodes/register", api.RegisterRequest{Name: "cpubox", DataAddr: "127.0.0.1:7001", Type: "cpu-1t", Units: 1,
		Cores: 6, MemoryBytes: 8 << 30, CPUShare: 1, CPUShareMode: api.CPUShareNone}, &reg)
	code, out, errs := placeCmd(t, "--model", "mlp-digits", "--node", "cpubox", "--coordinator", url, "--cpu-devices", "3", "--method", "single", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got placeJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Join(got.Devices, ",") != "cpu0,cpu1,cpu2" {
		t.Errorf("devices %v, want 3 thread groups of the node's 6 cores", got.Devices)
	}
	if code, _, errs := placeCmd(t, "--model", "mlp-digits", "--node", "nobody", "--coordinator", url); code != exitUsage || !strings.Contains(errs, `no node "nobody"`) {
		t.Errorf("unknown node: exit %d: %s", code, errs)
	}
}

// TestPlaceExecutesThePlacements: --execute runs each placement's step on
// this machine's cores and reports the measured step; GPUs cannot run here.
func TestPlaceExecutesThePlacements(t *testing.T) {
	code, out, errs := placeCmd(t, "--model", "mlp-digits", "--batch", "32", "--devices", "local", "--method", "single,mincut", "--execute", "2", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got placeJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, m := range got.Methods {
		if !(m.MeasuredStep > 0) {
			t.Errorf("%s: measured step %g", m.Method, m.MeasuredStep)
		}
	}
	if code, _, errs := placeCmd(t, "--model", "mlp-digits", "--devices", "cpu-gpu", "--method", "single", "--execute", "1"); code != exitFailure || !strings.Contains(errs, "only cpu devices") {
		t.Errorf("--execute on a GPU: exit %d: %s", code, errs)
	}
}
