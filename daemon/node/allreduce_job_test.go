package node

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/prometheus/client_golang/prometheus"
)

// dpJobVariant writes the data-parallel job with extra lines appended and
// the model's path made absolute, and returns its path.
func dpJobVariant(t *testing.T, extra string) string {
	t.Helper()
	src, err := os.ReadFile("testdata/dp-job.toml")
	if err != nil {
		t.Fatal(err)
	}
	job := strings.Replace(string(src), `"testdata/tiny.toml"`, `"`+mustAbs(t, "testdata/tiny.toml")+`"`, 1) + extra
	path := t.TempDir() + "/job.toml"
	if err := os.WriteFile(path, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// blockPushes counts the dense-block pushes the nodes' clients made.
func blockPushes(t *testing.T, regs ...prometheus.Gatherer) uint64 {
	var n uint64
	for _, reg := range regs {
		for _, m := range families(t, reg)["heterps_ps_request_duration_seconds"].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == "push" && labels["param"] == "block" {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// TestDataParallelAllreduceJob trains the one-stage, two-replica job on two
// node daemons through the parameter server and with dense_sync =
// "allreduce": with allreduce the replicas push no dense block (they
// greet each other and reduce over the data plane), and the job ends with
// the loss of the parameter-server run (bit for bit here: two equal
// batches of 32 weigh by exact powers of two either way).
func TestDataParallelAllreduceJob(t *testing.T) {
	loss := map[string]float64{}
	for _, sync := range []string{"ps", "allreduce"} {
		t.Run(sync, func(t *testing.T) {
			cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
			_, ra := cl.startObservedNode("a", "cpu")
			_, rb := cl.startObservedNode("b", "cpu")
			cl.waitNodes(2)
			s := cl.waitJob(cl.submit(dpJobVariant(t, "dense_sync = \""+sync+"\"\n")), final)
			if s.State != api.JobDone || s.Step != 20 || len(s.Stages) != 1 || len(s.Stages[0].Nodes) != 2 {
				t.Fatalf("job %s (%s): step %d, stages %+v", s.State, s.Reason, s.Step, s.Stages)
			}
			pushes := blockPushes(t, ra, rb)
			if (pushes == 0) != (sync == "allreduce") {
				t.Errorf("%d dense-block pushes to the parameter server", pushes)
			}
			loss[sync] = s.Loss
		})
	}
	t.Logf("final loss: ps %v, allreduce %v", loss["ps"], loss["allreduce"])
	if d := math.Abs(loss["ps"] - loss["allreduce"]); !(d < 1e-6) {
		t.Fatalf("final loss %v with allreduce, %v through the parameter server", loss["allreduce"], loss["ps"])
	}
}

// TestAllreduceJobCheckpointsAndRestores: a two-replica allreduce job with
// two PS shards on two nodes checkpoints every 5 steps (its ring's first
// member mirrors the dense blocks on the servers); its step-20 files equal
// those of the same job through the parameter servers, and a job restored
// from its step 10 ends with them too, bit for bit, syncing by allreduce
// (its replicas load the restored optimiser state) or through the servers
// (equal batches of 32 weigh by powers of two either way) — and so does an
// allreduce job restored from the PS-synced job's step 10.
func TestAllreduceJobCheckpointsAndRestores(t *testing.T) {
	rootA, rootB, rootC, rootD, rootE := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)

	a := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("dense_sync = \"allreduce\"\n[checkpoint]\ndir = %q\nevery = 5\n", rootA))), final)
	if a.State != api.JobDone || a.Checkpoint == nil || a.Checkpoint.Step != 20 {
		t.Fatalf("allreduce job %s (%s), latest checkpoint %+v", a.State, a.Reason, a.Checkpoint)
	}
	for _, step := range []int64{5, 10, 15, 20} {
		if m, err := ckpt.VerifyDir(ckpt.StepDir(rootA, step)); err != nil || m.Shards != 2 || len(m.Files) != 2 {
			t.Errorf("step %d: manifest %+v (%v)", step, m, err)
		}
	}
	b := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("dense_sync = \"ps\"\n[checkpoint]\ndir = %q\nevery = 10\n", rootB))), final)
	restore := func(sync, root, from string) api.JobStatus {
		job := fmt.Sprintf("dense_sync = %q\n[checkpoint]\ndir = %q\nevery = 10\nrestore = %q\n", sync, root, ckpt.StepDir(from, 10))
		s := cl.waitJob(cl.submit(dpJob(t, job)), final)
		if got := s.Stages[0].DenseSync; got != sync {
			t.Fatalf("restored job %s asked for %s and synced by %q", s.ID, sync, got)
		}
		return s
	}
	c, d := restore(api.DenseSyncPS, rootC, rootA), restore(api.DenseSyncAllreduce, rootD, rootA)
	e := restore(api.DenseSyncAllreduce, rootE, rootB)
	for _, s := range []api.JobStatus{b, c, d, e} {
		if s.State != api.JobDone || s.Step != 20 {
			t.Fatalf("job %s %s at step %d: %s", s.ID, s.State, s.Step, s.Reason)
		}
	}
	for shard := range 2 {
		name := ps.FileName(shard, 2)
		for _, root := range []string{rootB, rootC, rootD, rootE} {
			sameTensors(t, filepath.Join(ckpt.StepDir(rootA, 20), name), filepath.Join(ckpt.StepDir(root, 20), name))
		}
	}
}

// TestAllreduceJobWithADirectoryButNoInterval: a job file may name a
// checkpoint directory without an interval (the servers then write only
// the checkpoints asked for); its allreduce stage mirrors its dense
// parameters at the steps of the job's checkpoint grid only, and trains
// to its end.
func TestAllreduceJobWithADirectoryButNoInterval(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)
	s := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("dense_sync = \"allreduce\"\n[checkpoint]\ndir = %q\n", t.TempDir()))), final)
	if s.State != api.JobDone || s.Step != 20 || s.Stages[0].DenseSync != api.DenseSyncAllreduce {
		t.Fatalf("job %s (%s) at step %d, synced by %q", s.State, s.Reason, s.Step, s.Stages[0].DenseSync)
	}
}

// TestAllreduceJobRestartsWhenAReplicaDies: an allreduce stage does not
// shrink in place when the node of a replica without a PS shard dies (the
// step in flight needs that replica): the job fails and restarts from its
// latest checkpoint, on the nodes left, still by allreduce as the file
// asks (its replicas load the restored optimiser state), and trains to its
// last step.
func TestAllreduceJobRestartsWhenAReplicaDies(t *testing.T) {
	root := t.TempDir()
	cl, stops := threeCPUNodes(t)
	id := cl.submit(writeJobFile(t, dpJobSource(t, 400)+fmt.Sprintf("dense_sync = \"allreduce\"\n[checkpoint]\ndir = %q\nevery = 20\nrestarts = 1\n", root)))
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Checkpoint != nil || s.State.Final() })
	if s.State != api.JobRunning || len(s.Stages[0].Nodes) != 2 || len(s.PS) != 1 {
		t.Fatalf("before the kill: %s (%s), stages %+v, ps %v", s.State, s.Reason, s.Stages, s.PS)
	}
	victim := s.Stages[0].Nodes[0]
	if victim == s.PS[0] {
		victim = s.Stages[0].Nodes[1]
	}
	stops[victim]()

	s = cl.waitJob(id, final)
	if s.State != api.JobFailed || s.RestartedAs == "" || s.Generation != 1 {
		t.Fatalf("after the kill: job %s (%q) generation %d, restarted as %q; want failed and restarted, not shrunk",
			s.State, s.Reason, s.Generation, s.RestartedAs)
	}
	r := cl.waitJob(s.RestartedAs, final)
	if r.State != api.JobDone || r.Step != 400 || r.RestoredFrom == nil || r.RestoredFrom.Step%20 != 0 {
		t.Fatalf("restart %s: %s (%s) at step %d, restored from %+v", r.ID, r.State, r.Reason, r.Step, r.RestoredFrom)
	}
	if got := r.Stages[0].DenseSync; got != api.DenseSyncAllreduce {
		t.Fatalf("restart %s synced by %q, want allreduce as the job file asks", r.ID, got)
	}
}
