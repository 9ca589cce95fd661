package node

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/internal/syncbuf"
)

func TestCopyFits(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name                               string
		need, pending, held, budget, avail int64
		ok                                 bool
		why                                string
	}{
		{"room everywhere", 100 * mb, 0, 100 * mb, 0, 1000 * mb, true, ""},
		{"unknown machine, no budget", 100 * mb, 0, 100 * mb, 0, -1, true, ""},
		{"within the budget", 100 * mb, 50 * mb, 100 * mb, 250 * mb, -1, true, ""},
		{"over the budget with the copies still written", 100 * mb, 60 * mb, 100 * mb, 250 * mb, -1, false, "exceeds their ps_memory of 250.0 MiB"},
		{"over nine tenths of the machine", 100 * mb, 0, 100 * mb, 0, 110 * mb, false, "does not fit in nine tenths of the 110.0 MiB"},
	} {
		ok, why := copyFits(c.need, c.pending, c.held, c.budget, c.avail)
		if ok != c.ok || !strings.Contains(why, c.why) {
			t.Errorf("%s: fits %v (%q), want %v (%q)", c.name, ok, why, c.ok, c.why)
		}
	}
}

// TestACheckpointThatDoesNotFitInMemoryIsWrittenInPlace: on a machine
// without the memory for a copy of its shards, a PS node writes each
// checkpoint straight from the shards while training waits, says so, and
// every checkpoint is complete: no copy doubles the shards in memory.
func TestACheckpointThatDoesNotFitInMemoryIsWrittenInPlace(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the cluster's cleanups
	avail := availableMemory
	availableMemory = func() int64 { return 4 << 10 }
	t.Cleanup(func() { availableMemory = avail })
	var logs syncbuf.Buffer
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	var regs []*prometheus.Registry
	for _, name := range []string{"a", "b"} {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		cl.startNodeAdjusted(name, "cpu", cl.base, func(c *Config) { c.Logger, c.Metrics = slog.New(slog.NewTextHandler(&logs, nil)), reg })
	}
	cl.waitNodes(2)
	root := t.TempDir()
	s := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", root))), final)
	if s.State != api.JobDone || s.Reason != "" || s.Checkpoint == nil || s.Checkpoint.Step != 20 || s.CheckpointFailures != 0 {
		t.Fatalf("job %s (%q), checkpoint %+v, %d failures", s.State, s.Reason, s.Checkpoint, s.CheckpointFailures)
	}
	for _, step := range []int64{5, 10, 15, 20} {
		if m, err := ckpt.VerifyDir(ckpt.StepDir(root, step)); err != nil || m.Step != step || m.Shards != 2 {
			t.Errorf("step %d: %+v (%v)", step, m, err)
		}
	}
	if !logs.Contains("checkpoint written in place, training waits for the disk") {
		t.Errorf("the nodes did not say they wrote in place:\n%s", logs.String())
	}
	inPlace := 0.0
	for _, reg := range regs {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "heterps_node_checkpoint_in_place_total" {
				inPlace += f.GetMetric()[0].GetCounter().GetValue()
			}
		}
	}
	if inPlace != 8 { // 4 checkpoints, a shard on each node
		t.Errorf("heterps_node_checkpoint_in_place_total: %g, want 8", inPlace)
	}
}

// TestACheckpointThatCanBeNeitherCopiedNorHeldIsReported: where a copy
// does not fit and writing in place would hold training too long (here
// any hold is too long), a checkpoint is not written and reported as such
// with the reason, training goes on, and the last step's, which holds no
// training any more, is written in place.
func TestACheckpointThatCanBeNeitherCopiedNorHeldIsReported(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the cluster's cleanups
	avail, limit := availableMemory, inPlaceHoldLimit
	availableMemory = func() int64 { return 4 << 10 }
	inPlaceHoldLimit = func(time.Duration) time.Duration { return 0 }
	t.Cleanup(func() { availableMemory, inPlaceHoldLimit = avail, limit })
	var logs syncbuf.Buffer
	cl := loggedCluster(t, &logs, func(*coord.Config) {})
	root := t.TempDir()
	s := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", root))), final)
	if s.State != api.JobDone || s.Reason != "" || s.Checkpoint == nil || s.Checkpoint.Step != 20 || s.CheckpointFailures < 3 {
		t.Fatalf("job %s (%q), checkpoint %+v, %d failures", s.State, s.Reason, s.Checkpoint, s.CheckpointFailures)
	}
	for _, step := range []int64{5, 10, 15} {
		if _, err := ckpt.ReadManifest(ckpt.StepDir(root, step)); err == nil {
			t.Errorf("step %d was written", step)
		}
	}
	if _, err := ckpt.VerifyDir(ckpt.StepDir(root, 20)); err != nil {
		t.Errorf("the last step's checkpoint: %v", err)
	}
	if !logs.Contains("would hold training about") {
		t.Errorf("the coordinator's log does not give the reason:\n%s", logs.String())
	}
}
