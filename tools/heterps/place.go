package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/place"
)

func init() {
	registerStoppable("place", "place the ops of a model's training step on one machine's devices (single, expert, mincut, exact, rl)", runPlace)
}

type placeFlags struct {
	model, devices, method string
	node, inventory        string // the devices from a node's inventory instead
	coord                  coordFlags
	cpuDevices             int
	coreFLOPS              float64
	batch, reps, samples   int
	execute                int
	seed                   uint64
	exactBound             float64
	measure, json          bool
}

func parsePlaceFlags(args []string, stderr io.Writer) (*placeFlags, []string, error) {
	f := &placeFlags{}
	fs := flag.NewFlagSet("place", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.model, "model", "ctrdnn", "model: zoo name, model file, or a synthetic graph ("+place.SyntheticNMT+", "+place.SyntheticInception+")")
	fs.StringVar(&f.devices, "devices", "cpu-gpu", "devices file, or a built-in one (cpu-gpu, cpu-2gpu, cpu-4gpu, local)")
	fs.StringVar(&f.node, "node", "", "instead of --devices: the devices of this node (id or name) from its inventory as --coordinator lists it")
	fs.StringVar(&f.inventory, "inventory", "", "instead of --devices: the devices of the node whose inventory this JSON file holds (as a node registers it, or one node of GET /v1/nodes)")
	fs.IntVar(&f.cpuDevices, "cpu-devices", 0, "with --node or --inventory: thread groups the cores are split into (0: 1 beside GPUs, else 2)")
	fs.Float64Var(&f.coreFLOPS, "core-flops", 0, "with --node or --inventory: one core's FP32 FLOP/s (0: 8.3e10)")
	f.coord.add(fs)
	fs.StringVar(&f.method, "method", "all", "rl, single, expert, mincut, exact, a comma-separated list, or all")
	fs.IntVar(&f.batch, "batch", 512, "samples per step (model graphs)")
	fs.BoolVar(&f.measure, "measure", false, "measure op times with the real kernels on this machine for the devices marked local (inside a step run on one core where every op runs here, else each kernel alone) and the link between two cores")
	fs.IntVar(&f.reps, "reps", 10, "with --measure: timed steps (or runs per kernel), the fastest kept")
	fs.IntVar(&f.execute, "execute", 0, "run each placement's step for real this many times on this machine's CPU (cpu devices only; their threads) and report the fastest (0: do not)")
	fs.IntVar(&f.samples, "samples", 0, "rl: placements sampled per restart (0: 1000 per co-location group, 10000 to 50000)")
	fs.Uint64Var(&f.seed, "seed", 1, "rl's seed")
	fs.Float64Var(&f.exactBound, "exact-bound", 0, "exact: most placements to enumerate (0: 2^18)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, fmt.Errorf("place: unexpected argument %q", fs.Arg(0))
	}
	if f.reps < 1 || f.samples < 0 || f.exactBound < 0 || f.cpuDevices < 0 || f.coreFLOPS < 0 || f.execute < 0 {
		return nil, nil, errors.New("place: --reps must be >= 1, --samples, --exact-bound, --cpu-devices, --core-flops and --execute >= 0")
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if n := btoi(set["devices"]) + btoi(f.node != "") + btoi(f.inventory != ""); n > 1 {
		return nil, nil, errors.New("place: give one of --devices, --node and --inventory")
	}
	names, err := place.ParseMethods(f.method)
	if err != nil {
		return nil, nil, fmt.Errorf("place: --method: %w", err)
	}
	return f, names, nil
}

// placeJSON is `heterps place --json`.
type placeJSON struct {
	Model    string   `json:"model"`
	Devices  []string `json:"devices"`
	Ops      int      `json:"ops"`
	Groups   int      `json:"groups"`
	Measured int      `json:"measured_ops,omitempty"`
	// MeasuredHow is how the op times were measured: "in-step" (inside a
	// step executed on one core) or "alone" (each kernel by itself, when
	// some op cannot run here).
	MeasuredHow string `json:"measured_how,omitempty"`
	// LinkLatency and LinkBandwidth are the measured transfer between two
	// cores that replaces the local devices' link figures.
	LinkLatency   float64           `json:"link_latency_s,omitempty"`
	LinkBandwidth float64           `json:"link_bandwidth_bytes_s,omitempty"`
	Methods       []placeMethodJSON `json:"methods"`
}

type placeMethodJSON struct {
	Method        string  `json:"method"`
	Skipped       string  `json:"skipped,omitempty"`
	StepSeconds   float64 `json:"step_s"`
	Cost          float64 `json:"cost_s"` // the step, penalised when it does not fit
	Fits          bool    `json:"fits"`
	SearchSeconds float64 `json:"search_s"`
	FromBest      float64 `json:"from_best"` // cost / best cost - 1
	Evaluated     int     `json:"evaluated"`
	MovedBytes    int64   `json:"moved_bytes"`
	// MeasuredStep is the fastest step of the placement executed for real
	// (--execute).
	MeasuredStep    float64 `json:"measured_step_s,omitempty"`
	PolicyCost      float64 `json:"policy_cost_s,omitempty"`
	BestSampledCost float64 `json:"best_sampled_cost_s,omitempty"`
	// Placement is each co-location group's device ("mixed" when its ops
	// are on several).
	Placement map[string]string `json:"placement,omitempty"`
}

func runPlace(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, names, err := parsePlaceFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return failTo(stderr, exitUsage, err)
	}
	g, err := place.LoadGraph(f.model, f.batch)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	devs, err := placeDevices(ctx, f)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	s, err := place.NewSimulator(g, devs.Devices)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	measured, err := measureLocal(ctx, f, g, s)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	rows, err := place.Compare(ctx, s, names, place.Options{Seed: f.seed, ExactBound: f.exactBound, RL: place.RLOptions{Samples: f.samples}})
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	out := placeReport(g, devs.Devices, rows, measured)
	if err := executePlacements(ctx, f, g, devs.Devices, rows, &out); err != nil {
		return failTo(stderr, exitFailure, err)
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return failTo(stderr, exitFailure, err)
		}
		return exitOK
	}
	printPlace(stdout, out)
	return exitOK
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nodeInventory is a node's inventory as it registers it
// (api.RegisterRequest) and as the coordinator lists it (api.NodeStatus):
// both carry these fields.
type nodeInventory struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Cores       int       `json:"cores"`
	MemoryBytes int64     `json:"memory_bytes"`
	GPUs        []api.GPU `json:"gpus"`
}

// placeDevices is the device set: a devices file, or built from a node's
// inventory (--node, --inventory).
func placeDevices(ctx context.Context, f *placeFlags) (*place.Devices, error) {
	var inv nodeInventory
	switch {
	case f.node != "":
		var err error
		if inv, err = inventoryOfNode(ctx, f); err != nil {
			return nil, err
		}
	case f.inventory != "":
		src, err := config.ReadFile(f.inventory)
		if err != nil {
			return nil, fmt.Errorf("place: --inventory: %w", err)
		}
		if err := json.Unmarshal(src, &inv); err != nil {
			return nil, fmt.Errorf("place: --inventory %s: %w", f.inventory, err)
		}
		if inv.Name == "" {
			inv.Name = f.inventory
		}
	default:
		return place.LoadDevices(f.devices)
	}
	pi := place.Inventory{Name: inv.Name, Cores: inv.Cores, MemoryBytes: inv.MemoryBytes}
	for _, g := range inv.GPUs {
		pi.GPUs = append(pi.GPUs, place.InventoryGPU{Name: g.Name, MemoryBytes: g.MemoryBytes, Multiprocessors: g.Multiprocessors})
	}
	return place.DevicesFromInventory(pi, place.InventoryOptions{CPUDevices: f.cpuDevices, CoreFLOPS: f.coreFLOPS})
}

// inventoryOfNode asks the coordinator for its nodes (the node daemon
// serves no inventory of its own: it registers it with the coordinator)
// and returns the one whose id is f.node, or else the live one so named.
func inventoryOfNode(ctx context.Context, f *placeFlags) (nodeInventory, error) {
	c, err := f.coord.client()
	if err != nil {
		return nodeInventory{}, err
	}
	defer c.close()
	nodes, err := c.nodes(ctx)
	if err != nil {
		return nodeInventory{}, fmt.Errorf("place: --node %s: %w", f.node, err)
	}
	found := -1
	for i, n := range nodes {
		if n.ID == f.node || (found < 0 && n.Name == f.node && n.State == api.NodeAlive) {
			found = i
		}
		if n.ID == f.node {
			break
		}
	}
	if found < 0 {
		return nodeInventory{}, fmt.Errorf("place: --node: no node %q (by id, or a live one by name) among the coordinator's %d", f.node, len(nodes))
	}
	n := nodes[found]
	return nodeInventory{ID: n.ID, Name: n.Name, Cores: n.Cores, MemoryBytes: n.MemoryBytes, GPUs: n.GPUs}, nil
}

// measureLocal times the graph's ops and the link between two cores on
// this machine's CPU for the local devices when asked (nil when not).
func measureLocal(ctx context.Context, f *placeFlags, g *place.Graph, s *place.Simulator) (*place.Measured, error) {
	if !f.measure {
		return nil, nil
	}
	local := false
	for _, d := range s.Devices() {
		local = local || d.Local
	}
	if !local {
		return nil, fmt.Errorf("place: --measure: devices %s has no device marked local = true", f.devices)
	}
	m, err := place.MeasureLocal(ctx, g, 1, f.reps)
	if err != nil {
		return nil, err
	}
	s.UseMeasured(m)
	return m, nil
}

// executePlacements runs each method's placement for real with --execute.
func executePlacements(ctx context.Context, f *placeFlags, g *place.Graph, devs []place.Device, rows []place.Row, out *placeJSON) error {
	if f.execute == 0 {
		return nil
	}
	for i, r := range rows {
		if r.Outcome == nil {
			continue
		}
		ex, err := place.Execute(ctx, g, devs, r.Outcome.Placement, f.execute)
		if err != nil {
			return fmt.Errorf("place: --execute: %s's placement: %w", r.Method, err)
		}
		out.Methods[i].MeasuredStep = ex.Step
	}
	return nil
}

func placeReport(g *place.Graph, devs []place.Device, rows []place.Row, measured *place.Measured) placeJSON {
	out := placeJSON{Model: g.Name, Ops: len(g.Ops), Groups: len(g.Groups)}
	if measured != nil {
		out.Measured, out.MeasuredHow = measured.Measured, measured.How
		if l := measured.Link; l != nil {
			out.LinkLatency, out.LinkBandwidth = l.Latency, l.Bandwidth
		}
	}
	for _, d := range devs {
		out.Devices = append(out.Devices, d.Name)
	}
	for _, r := range rows {
		m := placeMethodJSON{Method: r.Method, Skipped: r.Skipped}
		if o := r.Outcome; o != nil {
			m.StepSeconds, m.Cost, m.Fits = o.Result.Step, o.Result.Cost, o.Result.Fits
			m.SearchSeconds, m.FromBest, m.Evaluated, m.MovedBytes = o.Search.Seconds(), r.FromBest, o.Evaluated, o.Result.Moved
			m.PolicyCost, m.BestSampledCost = o.PolicyCost, o.BestSampledCost
			m.Placement = map[string]string{}
			for grp, d := range place.GroupDevices(g, o.Placement) {
				name := "mixed"
				if d >= 0 {
					name = devs[d].Name
				}
				m.Placement[g.Groups[grp]] = name
			}
		}
		out.Methods = append(out.Methods, m)
	}
	return out
}

func printPlace(w io.Writer, r placeJSON) {
	fmt.Fprintf(w, "%s: %d ops in %d co-location groups on %s", r.Model, r.Ops, r.Groups, strings.Join(r.Devices, ", "))
	if r.Measured > 0 {
		fmt.Fprintf(w, " (%d op times measured on this CPU, %s", r.Measured, r.MeasuredHow)
		if r.LinkBandwidth > 0 {
			fmt.Fprintf(w, "; link between cores %.1f us + %.1f GB/s", r.LinkLatency*1e6, r.LinkBandwidth/1e9)
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tstep ms\tfits\tsearch s\tfrom best\tplacements simulated\tgroups per device\t")
	for _, m := range r.Methods {
		if m.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\tskipped (below)\t\n", m.Method)
			continue
		}
		fits := "yes"
		if !m.Fits {
			fits = "NO"
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%s\t%.3f\t%+.1f%%\t%d\t%s\t\n", m.Method, m.StepSeconds*1e3, fits, m.SearchSeconds, 100*m.FromBest, m.Evaluated, perDevice(r.Devices, m.Placement))
	}
	tw.Flush()
	for _, m := range r.Methods {
		if m.Skipped != "" {
			fmt.Fprintf(w, "%s skipped: %s\n", m.Method, m.Skipped)
		}
		if m.MeasuredStep > 0 {
			fmt.Fprintf(w, "%s executed for real: %.3f ms a step (simulated %.3f ms)\n", m.Method, m.MeasuredStep*1e3, m.StepSeconds*1e3)
		}
		if m.Method == "rl" && m.Skipped == "" {
			fmt.Fprintf(w, "rl: the trained policy's own placement %.3f ms (reported above); the best it sampled while training %.3f ms\n",
				m.PolicyCost*1e3, m.BestSampledCost*1e3)
		}
	}
}

// perDevice counts groups per device ("cpu:2 gpu0:7").
func perDevice(devs []string, placement map[string]string) string {
	count := map[string]int{}
	for _, d := range placement {
		count[d]++
	}
	var parts []string
	for _, d := range append(devs, "mixed") {
		if count[d] > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", d, count[d]))
		}
	}
	return strings.Join(parts, " ")
}
