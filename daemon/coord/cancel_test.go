package coord

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// blockingMethod plans nothing: it waits for its context, so that tests
// can catch a job while it is planning.
type blockingMethod struct{}

// planCancelled hears from blockingMethod when its context ends.
var planCancelled = make(chan struct{}, 1)

func (blockingMethod) Schedule(ctx context.Context, _ *sched.Problem) (*sched.Plan, error) {
	<-ctx.Done()
	select {
	case planCancelled <- struct{}{}:
	default:
	}
	return nil, ctx.Err()
}

func init() {
	sched.Register("test-blocking", "waits for its context (coord tests)", func(sched.Options) sched.Method { return blockingMethod{} })
}

// TestCancelWhilePlanning cancels a job whose scheduler is still running:
// the job is cancelled at once and the scheduler's context ends.
func TestCancelWhilePlanning(t *testing.T) {
	tc := startCluster(t, nil)
	tc.start(newFakeNode("cpu-a", "cpu", 2, 7501)) // with no live node a job waits, queued, without planning
	id := tc.submit(strings.Replace(ctrJob, `name = "ctr"`, `name = "ctr"`+"\nmethod = \"test-blocking\"", 1))
	waitFor(t, "planning", func() bool { return tc.job(id).State == api.JobPlanning })
	var s api.JobStatus
	tc.call("DELETE", "/v1/jobs/"+id, nil, http.StatusOK, &s)
	if s.State != api.JobCancelled {
		t.Fatalf("after DELETE: %s", s.State)
	}
	select {
	case <-planCancelled:
	case <-time.After(patience):
		t.Fatal("the scheduler's context did not end")
	}
	if got := tc.job(id); got.State != api.JobCancelled || got.Plan != nil {
		t.Errorf("later: %s with plan %s", got.State, got.Plan)
	}
}
