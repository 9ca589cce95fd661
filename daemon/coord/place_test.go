package coord

import (
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

func testNode(name, typ, kind, addr string, units int) *node {
	return &node{id: name, kind: kind, state: api.NodeAlive,
		req: api.RegisterRequest{Name: name, Type: typ, Units: units, DataAddr: addr}}
}

func names(reps []replica) (out []string) {
	for _, r := range reps {
		out = append(out, r.node.req.Name)
	}
	return out
}

func TestPlaceSplitsStagesOverNodes(t *testing.T) {
	g2 := testNode("g2", "gpu", config.KindGPU, "127.0.0.1:1", 2)
	g1 := testNode("g1", "gpu", config.KindGPU, "127.0.0.1:2", 1)
	g4 := testNode("g4", "gpu", config.KindGPU, "127.0.0.1:3", 4) // busy with another job
	c1 := testNode("c1", "cpu", config.KindCPU, "127.0.0.1:4", 1)
	c3 := testNode("c3", "cpu", config.KindCPU, "127.0.0.1:5", 3)
	c9 := testNode("c9", "cpu", config.KindCPU, "127.0.0.1:6", 9) // hosts a PS shard of another job
	cl := cluster{live: []*node{g1, g2, g4, c1, c3, c9}, busy: map[*node]bool{g4: true}, load: map[*node]int{g4: 1, c9: 1}}
	plan := &sched.Plan{Stages: []sched.Stage{
		{First: 0, Last: 1, Type: "gpu", Units: 3},
		{First: 2, Last: 4, Type: "cpu", Units: 2},
	}, PSCores: 3}
	pl, err := place(plan, 10, cl, true)
	if err != nil {
		t.Fatal(err)
	}
	// Largest free offer first; a replica uses what the stage still needs.
	if got := names(pl.stages[0]); strings.Join(got, ",") != "g2,g1" {
		t.Errorf("gpu stage on %v, want g2,g1", got)
	}
	if got := names(pl.stages[1]); strings.Join(got, ",") != "c9" || pl.stages[1][0].units != 2 {
		t.Errorf("cpu stage on %v with %d units, want 2 of c9", got, pl.stages[1][0].units)
	}
	// Batch 10 over 2+1 units: 6 and 3, the remainder to the first.
	if b0, b1 := pl.stages[0][0].batch, pl.stages[0][1].batch; b0 != 7 || b1 != 3 {
		t.Errorf("gpu batches %d, %d, want 7, 3", b0, b1)
	}
	if pl.stages[1][0].batch != 10 {
		t.Errorf("cpu batch %d, want 10", pl.stages[1][0].batch)
	}
	// PS shards: on the CPU node hosting the cpu stage, so that its worker
	// calls them in-process.
	if ps := psNames(pl); ps != "c9,c9,c9" {
		t.Errorf("ps on %v, want c9,c9,c9", ps)
	}
	// With no CPU stage, the least-loaded CPU nodes first (c9 hosts a shard
	// of another job).
	gpuOnly := &sched.Plan{Stages: plan.Stages[:1], PSCores: 3}
	if pl, err = place(gpuOnly, 10, cl, true); err != nil {
		t.Fatal(err)
	}
	if ps := psNames(pl); ps != "c1,c3,c1" {
		t.Errorf("ps on %v, want c1,c3,c1", ps)
	}
}

func psNames(pl *placement) string {
	var ps []string
	for _, n := range pl.ps {
		ps = append(ps, n.req.Name)
	}
	return strings.Join(ps, ",")
}

func TestPlaceRefusals(t *testing.T) {
	gpu := testNode("g", "gpu", config.KindGPU, "127.0.0.1:1", 1)
	cpu := testNode("c", "cpu", config.KindCPU, "127.0.0.1:2", 2)
	remote := testNode("r", "cpu", config.KindCPU, "192.0.2.1:7000", 2)
	stage := func(typ string, units int) *sched.Plan {
		return &sched.Plan{Stages: []sched.Stage{{First: 0, Last: 2, Type: typ, Units: units}}}
	}
	for _, tc := range []struct {
		name  string
		plan  *sched.Plan
		batch int
		live  []*node
		plain bool
		want  string
	}{
		{"too few units", stage("gpu", 2), 8, []*node{gpu, cpu}, true, "stage 0 (layers 0-2) needs 2 units of type gpu; free live nodes offer 1"},
		{"no node of the type", stage("gpu", 1), 8, []*node{cpu}, true, "needs 1 units of type gpu; free live nodes offer 0"},
		{"no cpu for the ps", stage("gpu", 1), 8, []*node{gpu}, true, "parameter-server shard(s) on CPU-type nodes; no live node offers a CPU type"},
		{"batch too small", &sched.Plan{Stages: []sched.Stage{{Type: "cpu", Units: 2}}}, 1, []*node{testNode("c1", "cpu", config.KindCPU, "127.0.0.1:4", 1), testNode("c2", "cpu", config.KindCPU, "127.0.0.1:3", 1)}, true, "batch 1 is too small for 2 replicas"},
		{"plain on a remote node", stage("cpu", 2), 8, []*node{remote}, true, "node r (192.0.2.1:7000) is not on loopback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := place(tc.plan, tc.batch, cluster{live: tc.live, busy: map[*node]bool{}, load: map[*node]int{}}, tc.plain)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	// With a secret, remote nodes are fine.
	if _, err := place(stage("cpu", 2), 8, cluster{live: []*node{remote}, busy: map[*node]bool{}, load: map[*node]int{}}, false); err != nil {
		t.Errorf("remote node with a secret: %v", err)
	}
}

// TestANodesGPUsServeAStageOneAtATime: a stage task runs on one GPU, so a
// node that names two GPUs offers a stage one unit — to the planner (free),
// to placement and to the allocator (stageUnits, no CPU throttle) — and a
// 2-GPU stage takes two such nodes; an emulated GPU node (no GPUs named)
// still offers all its units.
func TestANodesGPUsServeAStageOneAtATime(t *testing.T) {
	withGPUs := func(name, addr string, devices ...int) *node {
		n := testNode(name, "gpu", config.KindGPU, addr, len(devices))
		n.req.GPUDevices = devices
		return n
	}
	a, b := withGPUs("a", "127.0.0.1:1", 0, 1), withGPUs("b", "127.0.0.1:2", 0, 1)
	emulated := testNode("e", "gpu", config.KindGPU, "127.0.0.1:3", 2)
	ps := testNode("c", "cpu", config.KindCPU, "127.0.0.1:4", 1)
	cl := cluster{live: []*node{a, b, ps}, busy: map[*node]bool{}, load: map[*node]int{}}
	if free := cl.free()["gpu"]; free != 2 {
		t.Errorf("two 2-GPU nodes offer %d units to the planner, want 2 (one a node)", free)
	}
	plan := &sched.Plan{Stages: []sched.Stage{{First: 0, Last: 1, Type: "gpu", Units: 2}}}
	pl, err := place(plan, 8, cl, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(pl.stages[0]); strings.Join(got, ",") != "a,b" || pl.stages[0][0].units != 1 || pl.stages[0][1].units != 1 {
		t.Errorf("2-GPU stage on %v (%+v), want one GPU of a and one of b", got, pl.stages[0])
	}
	if _, err := place(plan, 8, cluster{live: []*node{a, ps}, busy: map[*node]bool{}, load: map[*node]int{}}, true); err == nil ||
		!strings.Contains(err.Error(), "offer 1") {
		t.Errorf("2 GPUs of one node placed as one stage: %v", err)
	}
	if a.stageUnits() != 1 || a.taskShare(1) != 1 || emulated.stageUnits() != 2 || emulated.taskShare(1) != 0.5 {
		t.Errorf("stageUnits/taskShare: GPU node %d/%g, emulated %d/%g; want 1/1, 2/0.5",
			a.stageUnits(), a.taskShare(1), emulated.stageUnits(), emulated.taskShare(1))
	}
}
