package coord

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// The auto rule: the method measured the faster on the stage's type when
// its profile says, else allreduce for a stage of at least two replicas
// whose dense bytes times replicas reach AllreduceMinBytes, in a job that
// allows either way; a stage of one replica keeps its dense parameters
// (allreduce over a ring of one) unless the file names ps; an explicit
// choice wins.
func TestDenseSyncRule(t *testing.T) {
	m, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	last := len(m.Layers) - 1
	all := denseBytes(m, 0, last)
	if all < AllreduceMinBytes/2 || denseBytes(m, 0, 0) != 0 {
		t.Fatalf("ctrdnn: %d dense bytes in all, %d in the embedding layer; want about 1.2 MB and 0", all, denseBytes(m, 0, 0))
	}
	job := func(sync, extra string) *config.Job {
		if sync != "" {
			extra = "dense_sync = \"" + sync + "\"\n" + extra
		}
		jf, err := config.ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 64\nsteps = 10\n"+extra))
		if err != nil {
			t.Fatal(err)
		}
		return jf
	}
	for _, tc := range []struct {
		name        string
		jf          *config.Job
		first, reps int
		measured    string
		want        string
	}{
		{"auto, whole model on 2 replicas", job("auto", ""), 0, 2, "", api.DenseSyncAllreduce},
		{"auto, one replica", job("auto", ""), 0, 1, "", api.DenseSyncAllreduce},
		{"unnamed, no restarts, one replica", job("", ""), 0, 1, "", api.DenseSyncAllreduce},
		{"unnamed, no restarts, 2 replicas", job("", ""), 0, 2, "allreduce", api.DenseSyncPS},
		{"unnamed, restarts, 2 replicas", job("", "[checkpoint]\ndir = \"/x\"\nevery = 5\nrestarts = 1\n"), 0, 2, "", api.DenseSyncAllreduce},
		{"unnamed, asp, one replica", job("", "mode = \"asp\"\n"), 0, 1, "", api.DenseSyncPS},
		{"ps, one replica", job("ps", ""), 0, 1, "", api.DenseSyncPS},
		{"auto, only the small last layers", job("auto", ""), last - 1, 4, "", api.DenseSyncPS},
		{"auto, checkpointed", job("auto", "[checkpoint]\ndir = \"/x\"\nevery = 5\n"), 0, 2, "", api.DenseSyncAllreduce},
		{"allreduce, restored", job("allreduce", "[checkpoint]\nrestore = \"/x/step-5\"\n"), 0, 2, "", api.DenseSyncAllreduce},
		{"auto, asp", job("auto", "mode = \"asp\"\n"), 0, 2, "", api.DenseSyncPS},
		{"auto, ps measured faster", job("auto", ""), 0, 2, "ps", api.DenseSyncPS},
		{"auto, allreduce measured faster", job("auto", ""), last - 1, 4, "allreduce", api.DenseSyncAllreduce},
		{"auto, ps measured, one replica", job("auto", ""), 0, 1, "ps", api.DenseSyncAllreduce},
		{"auto, allreduce measured, asp", job("auto", "mode = \"asp\"\n"), 0, 2, "allreduce", api.DenseSyncPS},
		{"ps", job("ps", ""), 0, 4, "allreduce", api.DenseSyncPS},
		{"allreduce, one replica", job("allreduce", ""), 0, 1, "", api.DenseSyncAllreduce},
	} {
		if got := denseSync(tc.jf, m, tc.first, last, tc.reps, tc.measured); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestAllreduceTasksCarryTheirRing: with dense_sync = "allreduce" every
// stage task says so and lists the data addresses of its stage's replicas
// in replica order, and the replicas whose node also hosts a
// parameter-server shard (RingRelieve).
func TestAllreduceTasksCarryTheirRing(t *testing.T) {
	tc := startCluster(t, nil)
	job := strings.Replace(ctrJob, "steps = 12", "steps = 12\ndense_sync = \"allreduce\"", 1)
	nodes := tc.nodesFor(tc.expectedPlan(job))
	s := tc.waitJob(tc.submit(job))
	if s.State != api.JobDone {
		t.Fatalf("job %s: %s", s.State, s.Reason)
	}
	for _, st := range s.Stages {
		if st.DenseSync != api.DenseSyncAllreduce {
			t.Errorf("status of stage %d: dense_sync %q, want allreduce", st.Stage, st.DenseSync)
		}
	}
	rings := map[int][]string{} // stage -> the ring its tasks carry
	addrs := map[int][]string{} // stage -> replica -> the node's data address
	relieved := map[int][]int{} // stage -> the replicas whose node hosts a shard
	for _, n := range nodes {
		received, _, _ := n.snapshot()
		hostsPS := slices.ContainsFunc(slices.Collect(maps.Values(received)), func(t api.Task) bool { return t.Role == api.RolePS })
		for _, task := range received {
			if task.Role != api.RoleStage {
				continue
			}
			if hostsPS {
				relieved[task.Stage] = append(relieved[task.Stage], task.Replica)
			}
			if sync := task.Layout[task.Stage].DenseSync; sync != api.DenseSyncAllreduce || len(task.Ring) != task.Replicas {
				t.Fatalf("task %s: dense_sync %q with ring %v, want allreduce over its %d replicas", task.TaskID, sync, task.Ring, task.Replicas)
			}
			if r, ok := rings[task.Stage]; ok && !slices.Equal(r, task.Ring) {
				t.Errorf("stage %d: rings %v and %v", task.Stage, r, task.Ring)
			}
			rings[task.Stage] = task.Ring
			if addrs[task.Stage] == nil {
				addrs[task.Stage] = make([]string, task.Replicas)
			}
			addrs[task.Stage][task.Replica] = n.req.DataAddr
		}
	}
	if len(rings) == 0 {
		t.Fatal("no stage tasks")
	}
	for st, r := range rings {
		if !slices.Equal(r, addrs[st]) {
			t.Errorf("stage %d: ring %v, its replicas are at %v", st, r, addrs[st])
		}
	}
	for _, task := range receivedTasks(nodes, api.RoleStage) {
		want := relieved[task.Stage]
		slices.Sort(want)
		if !slices.Equal(task.RingRelieve, want) {
			t.Errorf("task %s: relieves %v, the replicas on nodes with a shard are %v", task.TaskID, task.RingRelieve, want)
		}
	}
	if len(relieved) == 0 {
		t.Error("no stage replica shares its node with a shard: the check above proves nothing")
	}
}
