package coord

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// series returns the value of every series of family name whose labels
// include want, keyed by their label pairs.
func series(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			key := ""
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

func one(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	s := series(t, reg, name, labels)
	if len(s) != 1 {
		t.Fatalf("%s%v: %d series %v, want 1", name, labels, len(s), s)
	}
	for _, v := range s {
		return v
	}
	return 0
}

// TestMetricsFollowJobsAndForgetThem: while a job runs its step and
// trained samples move and every stage replica has a batch series; done,
// it counts under state done; once the coordinator forgets it (beyond
// KeepFinished) none of its series is left.
func TestMetricsFollowJobsAndForgetThem(t *testing.T) {
	tc := startCluster(t, func(c *Config) { c.KeepFinished = 1 })
	reg := prometheus.NewPedanticRegistry() // also checks every series against its description
	if err := tc.c.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	plan := tc.expectedPlan(ctrJob)
	nodes := tc.nodesFor(plan)
	if got := one(t, reg, "heterps_nodes", map[string]string{"state": "alive"}); got != float64(len(nodes)) {
		t.Errorf("heterps_nodes{alive} = %v", got)
	}
	if ages := series(t, reg, "heterps_node_heartbeat_age_seconds", nil); len(ages) == 0 {
		t.Error("no heartbeat ages")
	}
	first := tc.submit(ctrJob)
	job := map[string]string{"job_id": first}
	var step, samples float64
	waitFor(t, "a step", func() bool {
		step = one(t, reg, "heterps_job_step", job)
		samples = one(t, reg, "heterps_job_trained_samples_total", job)
		return step > 0 && step < 12
	})
	if samples != step*512 {
		t.Errorf("trained samples %v at step %v, want step x 512", samples, step)
	}
	if n := len(series(t, reg, "heterps_job_replica_batch_size", job)); n < len(plan.Stages) {
		t.Errorf("%d replica batch series for %d stages", n, len(plan.Stages))
	}
	if one(t, reg, "heterps_job_stage_predicted_throughput_samples_per_second", map[string]string{"job_id": first, "stage": "0"}) <= 0 {
		t.Error("no predicted throughput for stage 0")
	}
	if s := tc.waitJob(first); s.State != "done" {
		t.Fatalf("job %s: %+v", first, s)
	}
	if got := one(t, reg, "heterps_job_trained_samples_total", job); got <= samples {
		t.Errorf("trained samples did not move: %v then %v", samples, got)
	}
	if one(t, reg, "heterps_jobs", map[string]string{"state": "done"}) != 1 ||
		one(t, reg, "heterps_job_state", map[string]string{"job_id": first, "state": "done"}) != 1 {
		t.Error("the done job does not count as done")
	}

	second := tc.submit(ctrJob)
	if s := tc.waitJob(second); s.State != "done" {
		t.Fatalf("job %s: %+v", second, s)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "job_id" && l.GetValue() == first {
					t.Errorf("forgotten job %s still has %s", first, mf.GetName())
				}
			}
		}
	}
	if len(series(t, reg, "heterps_job_step", map[string]string{"job_id": second})) != 1 {
		t.Error("the kept job has no step series")
	}
}

// TestReadyWhileServing: a coordinator is not ready before Serve, ready
// while it serves, and not ready once it has stopped.
func TestReadyWhileServing(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Ready() == nil {
		t.Error("ready before Serve")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx, ln) }()
	waitFor(t, "ready", func() bool { return c.Ready() == nil })
	cancel()
	select {
	case <-served:
	case <-time.After(patience):
		t.Fatal("Serve did not return")
	}
	if c.Ready() == nil {
		t.Error("ready after Serve returned")
	}
}
