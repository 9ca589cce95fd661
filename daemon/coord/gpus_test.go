package coord

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// The rule a GPU's driver name is held to against a catalog model.
func TestDeviceMatches(t *testing.T) {
	for _, tc := range []struct {
		model, name string
		want        bool
	}{
		{"NVIDIA Tesla V100-PCIE-32GB", "Tesla V100-PCIE-32GB", true},
		{"NVIDIA V100-SXM2-16GB", "Tesla V100-SXM2-16GB", true},
		{"NVIDIA T4", "Tesla T4", true},
		{"NVIDIA H200", "NVIDIA H200", true},
		{"V100", "Tesla V100-SXM2-32GB", true},
		{"", "anything", true},
		{"V100-PCIe (reference)", "Tesla V100-PCIE-16GB", true},
		{"NVIDIA A10", "NVIDIA A100-SXM4-40GB", false},
		{"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", false},
		{"NVIDIA Tesla V100-PCIE-32GB", "Tesla V100-SXM2-32GB", false},
		{"NVIDIA T4", "NVIDIA H200", false},
	} {
		if got := deviceMatches(tc.model, tc.name); got != tc.want {
			t.Errorf("deviceMatches(%q, %q) = %v, want %v", tc.model, tc.name, got, tc.want)
		}
	}
}

// Each way a node's GPUs can fail its type is refused with a reason that
// names the node, the type and what is missing; GPUs that back the type
// pass.
func TestCheckNodeGPUs(t *testing.T) {
	v100 := config.CatalogType{Name: "v100", Kind: config.KindGPU, Model: "NVIDIA Tesla V100-PCIE-32GB"}
	cpu := config.CatalogType{Name: "cpu", Kind: config.KindCPU}
	two := []api.GPU{{Name: "Tesla V100-PCIE-32GB"}, {Name: "Tesla V100-PCIE-32GB"}}
	req := func(units int, gpus []api.GPU, devices ...int) api.RegisterRequest {
		return api.RegisterRequest{Name: "g1", Type: "v100", Units: units, GPUs: gpus, GPUDevices: devices}
	}
	for _, tc := range []struct {
		name    string
		req     api.RegisterRequest
		typ     config.CatalogType
		emulate bool
		want    string // "" = accepted
	}{
		{"backed", req(2, two, 1, 0), v100, false, ""},
		{"one of two", req(1, two, 1), v100, false, ""},
		{"cpu type", api.RegisterRequest{Name: "c1", Type: "cpu", Units: 4}, cpu, false, ""},
		{"emulated", req(2, nil), v100, true, ""},
		{"no gpus named", req(2, two), v100, false, "names no gpus"},
		{"no driver", req(2, nil, 0, 1), v100, false, "lists no GPU"},
		{"emulated, gpus named, no driver", req(1, nil, 0), v100, true, "lists no GPU"},
		{"fewer gpus than units", req(2, two, 0), v100, false, "1 gpus for 2 units"},
		{"ordinal absent", req(2, two, 0, 2), v100, false, "names GPU 2, but the node has 2 GPU(s)"},
		{"another model", req(1, []api.GPU{{Name: "Tesla T4"}}, 0), v100, false, `GPU 0 is a "Tesla T4"`},
		{"gpus on a cpu type", api.RegisterRequest{Name: "c1", Type: "cpu", Units: 1, GPUDevices: []int{0}}, cpu, false, "not a GPU type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNodeGPUs(tc.req, tc.typ, tc.emulate)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("accepted, want a refusal saying %q", tc.want)
			case tc.want != "" && (!strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "node "+tc.req.Name) || !strings.Contains(err.Error(), `type "`+tc.typ.Name+`"`)):
				t.Errorf("refused with %q, want it to name the node, the type and %q", err, tc.want)
			}
		})
	}
}

// The coordinator answers 400 with the reason to a node of a GPU type
// without GPUs, unless its catalog emulates GPUs, and accepts one whose
// GPUs back the type.
func TestRegisterRefusesAGPUTypeWithoutGPUs(t *testing.T) {
	tc := startH200Cluster(t)
	n := newFakeNode("gpu-a", "gpu", 1, 7001)
	var e api.Error
	tc.call("POST", "/v1/nodes/register", n.req, http.StatusBadRequest, &e)
	if !strings.Contains(e.Error, `node gpu-a, type "gpu" (kind gpu): its node file names no gpus`) {
		t.Errorf("got %q", e.Error)
	}
	n.req.GPUDevices = []int{0}
	n.req.GPUs = []api.GPU{{Name: "NVIDIA H200", MemoryBytes: 141 << 30}}
	var r api.RegisterResponse
	tc.call("POST", "/v1/nodes/register", n.req, http.StatusOK, &r)
	if r.NodeID == "" {
		t.Error("registered without a node id")
	}
}

// A second live node naming a GPU (by UUID) that another names is refused
// with 409, naming both nodes and the GPU; the same daemon registering
// again, a node naming another GPU of the machine, and a node after the
// first one died are accepted.
func TestRegisterRefusesAGPUAnotherNodeNames(t *testing.T) {
	tc := startH200Cluster(t)
	machine := []api.GPU{{Name: "NVIDIA H200", UUID: "GPU-00000000-0000-0000-0000-000000000000"},
		{Name: "NVIDIA H200", UUID: "GPU-11111111-1111-1111-1111-111111111111"}}
	gpuNode := func(name string, port, ordinal int) *fakeNode {
		n := newFakeNode(name, "gpu", 1, port)
		n.req.GPUs, n.req.GPUDevices = machine, []int{ordinal}
		return n
	}
	a := gpuNode("gpu-a", 7001, 0)
	var r api.RegisterResponse
	tc.call("POST", "/v1/nodes/register", a.req, http.StatusOK, &r)
	var e api.Error
	tc.call("POST", "/v1/nodes/register", gpuNode("gpu-b", 7002, 0).req, http.StatusConflict, &e)
	for _, want := range []string{"node gpu-b names GPU 0 (GPU-00000000-0000-0000-0000-000000000000)", "live node gpu-a names as its GPU 0"} {
		if !strings.Contains(e.Error, want) {
			t.Errorf("got %q, want it to say %q", e.Error, want)
		}
	}
	tc.call("POST", "/v1/nodes/register", a.req, http.StatusOK, &r) // gpu-a restarted
	tc.call("POST", "/v1/nodes/register", gpuNode("gpu-c", 7003, 1).req, http.StatusOK, &r)
	tc.c.mu.Lock()
	for _, n := range tc.c.nodes {
		if n.req.Name == "gpu-a" && n.alive() {
			tc.c.declareDead(n, "test: killed", time.Now())
		}
	}
	tc.c.mu.Unlock()
	tc.call("POST", "/v1/nodes/register", gpuNode("gpu-b", 7002, 0).req, http.StatusOK, &r)
}

// startH200Cluster is a test cluster whose catalog's "gpu" type is an H200
// and whose GPUs are not emulated.
func startH200Cluster(t *testing.T) *testCluster {
	return startCluster(t, func(c *Config) {
		c.Catalog.EmulateGPUs = false
		for i := range c.Catalog.Types {
			if c.Catalog.Types[i].Name == "gpu" {
				c.Catalog.Types[i].Model = "NVIDIA H200"
			}
		}
	})
}
