package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/apiclient"
)

func init() {
	registerStoppable("cancel", "cancel a job of a running coordinator (the live restart of a restarted job)", runCancel)
}

const cancelUsage = "usage: heterps cancel JOB [--coordinator URL] [--secret-file F] [--tls-cert F --tls-key F --tls-ca F] [--json]"

// maxChain bounds how many restarts cancel follows from the job named: a
// coordinator keeps at most its last 1000 finished jobs.
const maxChain = 1000

// cancelTries is how many times cancel looks the job up again when the
// job it meant to cancel ended or restarted between the look-up and the
// cancel.
const cancelTries = 5

// runCancel cancels job JOB or, if it failed and was restarted from its
// checkpoint, the job that restarted it (following the chain to its live
// end). A job already cancelled counts as cancelled (exit 0, so that a
// repeated cancel is harmless); one that is done or failed for good
// cannot be, and exits 1.
func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return jobControl{name: "cancel", usage: cancelUsage, jsonHelp: "print the cancelled job's status as JSON",
		check: func(args []string) error {
			if len(args) != 1 || args[0] == "" {
				return fmt.Errorf("want one JOB, got %q", args)
			}
			return nil
		},
		act: func(ctx context.Context, c *coordClient, args []string) (api.JobStatus, string, error) {
			s, err := c.cancelChain(ctx, args[0])
			return s, describeCancelled(args[0], s), err
		}}.run(ctx, args, stdout, stderr)
}

// cancelChain cancels the live end of id's restart chain and returns its
// status: cancelled, or an error saying why it cannot be.
func (c *coordClient) cancelChain(ctx context.Context, id string) (api.JobStatus, error) {
	for range cancelTries {
		s, err := c.liveEnd(ctx, id)
		if err != nil {
			return s, err
		}
		switch s.State {
		case api.JobCancelled:
			return s, nil
		case api.JobDone, api.JobFailed:
			return s, fmt.Errorf("job %s is already %s (%s); nothing to cancel", s.ID, s.State, s.Reason)
		}
		cancelled, err := c.cancel(ctx, s.ID)
		var se *apiclient.StatusError
		if errors.As(err, &se) && se.Code == http.StatusConflict {
			continue // it ended or restarted since the look-up
		}
		return cancelled, err
	}
	return api.JobStatus{}, fmt.Errorf("job %s kept ending or restarting while being cancelled (%d tries); see heterps status %s", id, cancelTries, id)
}

// liveEnd returns the status of id, or of the job that restarted it, and
// so on to the end of the chain.
func (c *coordClient) liveEnd(ctx context.Context, id string) (api.JobStatus, error) {
	seen := map[string]bool{}
	for len(seen) <= maxChain {
		seen[id] = true
		s, err := c.job(ctx, id)
		if err != nil || s.RestartedAs == "" {
			return s, err
		}
		if seen[s.RestartedAs] {
			return s, fmt.Errorf("job %s: its restarts loop back to job %s", s.ID, s.RestartedAs)
		}
		id = s.RestartedAs
	}
	return api.JobStatus{}, fmt.Errorf("job %s: more than %d restarts to follow", id, maxChain)
}

// describeCancelled is cancel's line for a user: the job, its step, and
// the checkpoint a new job can resume from.
func describeCancelled(asked string, s api.JobStatus) string {
	line := fmt.Sprintf("job %s: %s at step %d/%d", s.ID, s.State, s.Step, s.Steps)
	if s.ID != asked {
		line = fmt.Sprintf("job %s (the restart of %s): %s at step %d/%d", s.ID, asked, s.State, s.Step, s.Steps)
	}
	if s.Checkpoint == nil {
		return line + "; no complete checkpoint"
	}
	return line + fmt.Sprintf("; latest checkpoint: step %d in %s (set checkpoint.restore to it to resume)", s.Checkpoint.Step, s.Checkpoint.Dir)
}
