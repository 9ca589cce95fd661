package node

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/heterps/heterps/daemon/api"
)

// startObservedNode starts a node like startNode whose metrics go to a
// registry of its own; it returns the agent (not yet necessarily
// registered) and the registry.
func (cl *cluster) startObservedNode(name, typ string) (*Agent, *prometheus.Registry) {
	cl.t.Helper()
	reg := prometheus.NewPedanticRegistry()
	a, err := New(Config{Name: name, Coordinator: cl.base, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: typ, Units: 1, Plain: true, ReadyTimeout: 30 * time.Second, StepTimeout: 30 * time.Second, Logger: quiet, Metrics: reg})
	if err != nil {
		cl.t.Fatal(err)
	}
	if a.Ready() == nil {
		cl.t.Errorf("node %s is ready before it ran", name)
	}
	cl.wg.Go(func() {
		if err := a.Run(cl.ctx); err != nil {
			cl.t.Errorf("node %s: %v", name, err)
		}
	})
	return a, reg
}

// families gathers reg by family name.
func families(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// sum adds up the values (or, for histograms, the observation counts) of
// the family's series.
func sum(mf *dto.MetricFamily) float64 {
	total := 0.0
	for _, m := range mf.GetMetric() {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return total
}

// TestNodeMetricsFollowItsTasks: while a job runs, the node that hosts
// its first stage and its PS shard counts steps and samples, times PS
// requests, shows the shard's rows and bytes and its stage's step, and
// counts wire traffic with the other node; once the job is cancelled its
// task and shard series are gone.
func TestNodeMetricsFollowItsTasks(t *testing.T) {
	cl := startCluster(t)
	a, reg := cl.startObservedNode("a", "cpu")
	cl.startNode("b", "gpu")
	cl.waitNodes(2)
	// The coordinator lists a node before the node has read the reply to
	// its registration: readiness follows within a moment, not at once.
	for deadline := time.Now().Add(patience); a.Ready() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("registered node not ready after %v: %v", patience, a.Ready())
		}
	}
	id := cl.submit(longJob(t))
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(patience)
	for {
		fams = families(t, reg)
		if sum(fams["heterps_node_steps_total"]) >= 3 && len(fams["heterps_ps_shard_rows"].GetMetric()) > 0 &&
			len(fams["heterps_node_task_step"].GetMetric()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no steps, shard or task series within %v", patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, name := range []string{"heterps_node_samples_total", "heterps_ps_request_duration_seconds", "heterps_ps_shard_rows",
		"heterps_ps_shard_bytes", "heterps_wire_sent_frames_total", "heterps_wire_received_bytes_total", "heterps_node_registered"} {
		if !(sum(fams[name]) > 0) {
			t.Errorf("%s is %v while the job runs", name, sum(fams[name]))
		}
	}
	if got := fams["heterps_node_task_step"].GetMetric()[0].GetLabel(); len(got) != 3 || got[0].GetValue() != id {
		t.Errorf("task step labels %v, want job %s, replica, stage", got, id)
	}

	cl.send(http.MethodDelete, "/v1/jobs/"+id, "", nil)
	deadline = time.Now().Add(patience)
	for {
		fams = families(t, reg)
		left := len(fams["heterps_node_task_step"].GetMetric()) + len(fams["heterps_ps_shard_rows"].GetMetric()) +
			len(fams["heterps_ps_shard_bytes"].GetMetric())
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d task and shard series left %v after the job was cancelled", left, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTaskLogNamesTheTask: a stage task's lines carry its job, stage and
// replica; a PS task's its job and shard.
func TestTaskLogNamesTheTask(t *testing.T) {
	var out strings.Builder
	a := &Agent{log: slog.New(slog.NewTextHandler(&out, nil))}
	stage := api.Task{JobID: "j7", TaskID: "t-stage", Role: api.RoleStage, Stage: 1, Replica: 2}
	shard := api.Task{JobID: "j7", TaskID: "t-ps", Role: api.RolePS, Shard: 3}
	a.taskLog(stage).Info("x")
	a.taskLog(shard).Info("y")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "job=j7 task=t-stage stage=1 replica=2") ||
		!strings.Contains(lines[1], "job=j7 task=t-ps shard=3") {
		t.Errorf("lines:\n%s", out.String())
	}
}
