package coord

import (
	"context"
	"strings"
	"testing"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// panickingMethod is a scheduling method with a bug: it panics.
type panickingMethod struct{}

func (panickingMethod) Schedule(context.Context, *sched.Problem) (*sched.Plan, error) {
	var stages []sched.Stage
	_ = stages[3] // index out of range, as a real bug would be
	return nil, nil
}

func init() {
	sched.Register("test-panics", "panics (coord tests)", func(sched.Options) sched.Method { return panickingMethod{} })
}

// TestAPanicInPlanningFailsTheJobOnly: a job whose planning panics fails
// with a reason that says so, and the coordinator goes on planning the
// next job; without the containment the panic ends the test binary.
func TestAPanicInPlanningFailsTheJobOnly(t *testing.T) {
	tc := startCluster(t, nil)
	tc.start(newFakeNode("cpu-a", "cpu", 2, 7601))
	tc.start(newFakeNode("cpu-b", "cpu", 2, 7602))
	bad := tc.submit(strings.Replace(ctrJob, `name = "ctr"`, `name = "ctr"`+"\nmethod = \"test-panics\"", 1))
	s := tc.waitJob(bad)
	if s.State != api.JobFailed || !strings.Contains(s.Reason, "internal error in planning") || !strings.Contains(s.Reason, "index out of range") {
		t.Fatalf("the job whose planning panicked: %s (%q)", s.State, s.Reason)
	}
	good := tc.submit(ctrJob)
	waitFor(t, "the next job to be placed", func() bool {
		st := tc.job(good).State
		return st == api.JobRunning || st.Final()
	})
	if st := tc.job(good); st.State == api.JobFailed {
		t.Fatalf("the next job failed: %s", st.Reason)
	}
}
