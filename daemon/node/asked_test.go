package node

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/internal/syncbuf"
)

// TestACheckpointAskedForIsTakenAtItsStep: a checkpoint asked for while a
// job runs (POST /v1/jobs/{id}/checkpoint) is written at the step the
// coordinator names, between the job's periodic ones, by both PS nodes;
// the ask then closes, and a job restored from that step ends with the
// same parameters, bit for bit, as the job that went on — with the dense
// parameters on the servers, and kept by an allreduce stage, whose first
// replica hands them over at the steps of the job's checkpoint grid.
func TestACheckpointAskedForIsTakenAtItsStep(t *testing.T) {
	for _, sync := range []string{api.DenseSyncPS, api.DenseSyncAllreduce} {
		t.Run(sync, func(t *testing.T) {
			var logs syncbuf.Buffer
			cl := loggedCluster(t, &logs, func(c *coord.Config) { c.AskGrid = 10 * time.Millisecond })
			const steps = 3000
			rootA, rootB := t.TempDir(), t.TempDir()
			job := func(root, extra string) string {
				return dpJobOf(t, steps, fmt.Sprintf("dense_sync = %q\n[checkpoint]\ndir = %q\nevery = %d\n%s", sync, root, steps, extra))
			}
			id := cl.submit(job(rootA, ""))
			cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 20 || s.State.Final() })
			var asked api.JobStatus
			cl.do(http.MethodPost, "/v1/jobs/"+id+"/checkpoint", "", nil, &asked)
			if asked.CheckpointAsked == nil || asked.CheckpointAsked.Step <= asked.Step || asked.CheckpointAsked.Step >= steps {
				t.Fatalf("asked at step %d: %+v, want a step ahead of it and before the last", asked.Step, asked.CheckpointAsked)
			}
			at := asked.CheckpointAsked.Step
			s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Checkpoint != nil || s.State.Final() })
			if s.Checkpoint == nil || s.Checkpoint.Step != at || s.CheckpointAsked != nil {
				t.Fatalf("job %s at step %d: checkpoint %+v, ask %+v, want step %d written and the ask closed:\n%s",
					s.State, s.Step, s.Checkpoint, s.CheckpointAsked, at, logs.String())
			}
			if m, err := ckpt.VerifyDir(ckpt.StepDir(rootA, at)); err != nil || m.Step != at || m.Shards != 2 {
				t.Fatalf("step %d: manifest %+v (%v)", at, m, err)
			}
			if a := cl.waitJob(id, final); a.State != api.JobDone || a.Checkpoint == nil || a.Checkpoint.Step != steps {
				t.Fatalf("job %s (%s), latest checkpoint %+v", a.State, a.Reason, a.Checkpoint)
			}
			b := cl.waitJob(cl.submit(job(rootB, fmt.Sprintf("restore = %q\n", ckpt.StepDir(rootA, at)))), final)
			if b.State != api.JobDone || b.RestoredFrom == nil || b.RestoredFrom.Step != at {
				t.Fatalf("restored job %s (%s) from %+v, want step %d", b.State, b.Reason, b.RestoredFrom, at)
			}
			for shard := range 2 {
				name := ps.FileName(shard, 2)
				sameTensors(t, filepath.Join(ckpt.StepDir(rootA, steps), name), filepath.Join(ckpt.StepDir(rootB, steps), name))
			}
		})
	}
}
