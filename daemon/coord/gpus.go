package coord

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// checkNodeGPUs refuses a registration whose GPUs do not back its type, so
// that no node trains on its CPU at a GPU type's price: a GPU type's node
// names one GPU per unit (its node file's gpus, req.GPUDevices), each
// present in its inventory (req.GPUs, listed by driver ordinal) and of the
// catalog type's model (deviceMatches); a CPU type's node names none. A
// catalog with emulate_gpus accepts GPU types on nodes without GPUs.
func checkNodeGPUs(req api.RegisterRequest, typ config.CatalogType, emulate bool) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("node %s, type %q (kind %s): %s", req.Name, typ.Name, typ.Kind, fmt.Sprintf(format, args...))
	}
	if typ.Kind != config.KindGPU {
		if len(req.GPUDevices) > 0 {
			return fail("its node file names gpus %v, but the catalog's type is not a GPU type: remove gpus, or offer a GPU type", req.GPUDevices)
		}
		return nil
	}
	if emulate && len(req.GPUDevices) == 0 {
		return nil
	}
	switch {
	case len(req.GPUDevices) == 0:
		return fail("its node file names no gpus: a GPU type's node names one GPU per unit (gpus = [0, ...], %d here)", req.Units)
	case len(req.GPUs) == 0:
		return fail("the node lists no GPU (no driver or device, or a heterps built without CUDA: make build-cuda); its node file names gpus %v", req.GPUDevices)
	case len(req.GPUDevices) != req.Units:
		return fail("its node file names %d gpus for %d units (one GPU per unit)", len(req.GPUDevices), req.Units)
	}
	for _, d := range req.GPUDevices {
		if d < 0 || d >= len(req.GPUs) {
			return fail("its node file names GPU %d, but the node has %d GPU(s) (ordinals 0..%d)", d, len(req.GPUs), len(req.GPUs)-1)
		}
		if name := req.GPUs[d].Name; !deviceMatches(typ.Model, name) {
			return fail("GPU %d is a %q, not the catalog type's model %q", d, name, typ.Model)
		}
	}
	return nil
}

// checkGPUsUnclaimed refuses a registration naming a GPU (by its UUID) that
// another live node names too: two daemons would train on one GPU, each
// billed as having it. A daemon registering again under its own name is
// not another node. c.mu is held.
func (c *Coordinator) checkGPUsUnclaimed(req api.RegisterRequest) error {
	mine := namedUUIDs(req)
	for _, other := range c.nodes {
		if !other.alive() || other.req.Name == req.Name {
			continue
		}
		for uuid, theirs := range namedUUIDs(other.req) {
			if ordinal, ok := mine[uuid]; ok {
				return fmt.Errorf("node %s names GPU %d (%s), which the live node %s names as its GPU %d: two daemons would train on one GPU, each billed for it; give each daemon its own GPUs (gpus = [...])",
					req.Name, ordinal, uuid, other.req.Name, theirs)
			}
		}
	}
	return nil
}

// namedUUIDs maps the UUIDs of the GPUs a registration names (its
// gpu_devices, looked up in its inventory) to their ordinals; GPUs the
// inventory gives no UUID are left out.
func namedUUIDs(req api.RegisterRequest) map[string]int {
	out := map[string]int{}
	for _, d := range req.GPUDevices {
		if d >= 0 && d < len(req.GPUs) && req.GPUs[d].UUID != "" {
			out[req.GPUs[d].UUID] = d
		}
	}
	return out
}

// deviceMatches reports whether a GPU the driver names name is of the
// catalog model model. Both are read as words, lower case, split at
// spaces, '-', '_' and '/', without parenthesised remarks and without the
// vendor and brand words the driver adds or omits by generation
// ("NVIDIA", "Tesla"); the model's words must appear in name's, in order
// and contiguous. So "NVIDIA Tesla V100-PCIE-32GB" matches the driver's
// "Tesla V100-PCIE-32GB", and "V100" any V100, but "A10" no "A100" and
// "A100-SXM4-80GB" no "A100-SXM4-40GB". An empty model matches any GPU.
func deviceMatches(model, name string) bool {
	want, have := deviceWords(model), deviceWords(name)
	if len(want) == 0 {
		return true
	}
	for i := 0; i+len(want) <= len(have); i++ {
		if slices.Equal(have[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

var (
	remark    = regexp.MustCompile(`\([^)]*\)`)
	wordSplit = regexp.MustCompile(`[\s\-_/]+`)
)

func deviceWords(s string) []string {
	var out []string
	for _, w := range wordSplit.Split(strings.ToLower(remark.ReplaceAllString(s, " ")), -1) {
		if w != "" && w != "nvidia" && w != "tesla" {
			out = append(out, w)
		}
	}
	return out
}
