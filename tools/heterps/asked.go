package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/apiclient"
)

func init() {
	registerStoppable("checkpoint", "write a checkpoint of a running job now, at the next step its parameter servers can take one at", runCheckpoint)
}

const checkpointUsage = "usage: heterps checkpoint JOB [--wait=false] [--timeout D] [--coordinator URL] [--secret-file F] [--tls-cert F --tls-key F --tls-ca F] [--json]"

// runCheckpoint asks the coordinator for a checkpoint of a running job
// (or of the live restart of a restarted one) and, unless --wait=false,
// waits until one of that step or a later one is complete.
func runCheckpoint(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	wait, timeout := true, 10*time.Minute
	return jobControl{name: "checkpoint", usage: checkpointUsage, jsonHelp: "print the job's status as JSON",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&wait, "wait", wait, "wait until the checkpoint is complete")
			fs.DurationVar(&timeout, "timeout", timeout, "with --wait, give up waiting after this long (the ask stays open)")
		},
		check: func(args []string) error {
			if len(args) != 1 || args[0] == "" {
				return fmt.Errorf("want one JOB, got %q", args)
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %s: want > 0", timeout)
			}
			return nil
		},
		act: func(ctx context.Context, c *coordClient, args []string) (api.JobStatus, string, error) {
			live, err := c.liveEnd(ctx, args[0]) // a job restarted from its checkpoint goes on as another
			if err != nil {
				return live, "", err
			}
			s, err := c.askCheckpoint(ctx, live.ID)
			if err != nil || !wait {
				return s, describeAsked(s), err
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			s, err = c.waitAsked(wctx, s)
			if err != nil {
				return s, "", err
			}
			return s, fmt.Sprintf("job %s: checkpoint of step %d written in %s", s.ID, s.Checkpoint.Step, s.Checkpoint.Dir), nil
		}}.run(ctx, args, stdout, stderr)
}

// describeAsked is the line for an ask not waited for.
func describeAsked(s api.JobStatus) string {
	if s.CheckpointAsked == nil {
		return fmt.Sprintf("job %s: %s at step %d", s.ID, s.State, s.Step)
	}
	return fmt.Sprintf("job %s: checkpoint asked for at step %d (now at step %d)", s.ID, s.CheckpointAsked.Step, s.Step)
}

func (c *coordClient) askCheckpoint(ctx context.Context, id string) (api.JobStatus, error) {
	var s api.JobStatus
	err := c.Do(ctx, apiclient.Request{Method: http.MethodPost, Path: "/v1/jobs/" + url.PathEscape(id) + "/checkpoint"}, &s)
	return s, err
}

// maxReasks bounds how many times waitAsked asks again for a checkpoint
// that a restarted coordinator forgot.
const maxReasks = 3

// waitAsked follows the job of asked, a status that holds an open ask,
// until a checkpoint of the asked step or a later one is complete, and
// returns the status that shows it. An ask a restarted coordinator forgot
// (the job runs, no failure closed it) is made again; it fails when the
// ask is closed without a checkpoint otherwise (the servers could not take
// it, the job ended) or ctx ends.
func (c *coordClient) waitAsked(ctx context.Context, asked api.JobStatus) (api.JobStatus, error) {
	if asked.CheckpointAsked == nil {
		return asked, fmt.Errorf("job %s: the coordinator did not take the ask", asked.ID)
	}
	step := asked.CheckpointAsked.Step
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for reasks := 0; ; {
		s, err := c.job(ctx, asked.ID)
		switch {
		case err != nil && ctx.Err() != nil:
			return s, fmt.Errorf("job %s: no checkpoint of step %d or later yet: %w (the ask stays open)", asked.ID, step, ctx.Err())
		case err != nil:
			return s, err
		case s.Checkpoint != nil && s.Checkpoint.Step >= step:
			return s, nil
		case s.CheckpointAsked == nil && forgotten(s, step) && reasks < maxReasks:
			reasks++
			if _, err := c.askCheckpoint(ctx, asked.ID); err != nil {
				return s, fmt.Errorf("job %s: asking again for the checkpoint the coordinator forgot: %w", asked.ID, err)
			}
		case s.CheckpointAsked == nil:
			return s, askClosed(s, step)
		} // still open
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// forgotten reports whether s, with no ask open and no checkpoint of step
// or later, lost its ask to a coordinator restart rather than to a
// failure or its end.
func forgotten(s api.JobStatus, step int64) bool {
	return s.State == api.JobRunning && (s.CheckpointFailure == nil || s.CheckpointFailure.Step < step)
}

// askClosed says why the ask of a checkpoint at step closed without one.
func askClosed(s api.JobStatus, step int64) error {
	switch {
	case s.State.Final():
		return fmt.Errorf("job %s ended (%s: %s) before a checkpoint of step %d was complete", s.ID, s.State, s.Reason, step)
	case s.CheckpointFailure != nil && s.CheckpointFailure.Step >= step:
		return fmt.Errorf("job %s: the checkpoint asked for could not be taken: step %d: %s", s.ID, s.CheckpointFailure.Step, s.CheckpointFailure.Error)
	}
	return fmt.Errorf("job %s: the coordinator forgot the ask %d times (restarts?)", s.ID, maxReasks)
}

// defaultStopCheckpoint is how long launch and run, interrupted, wait by
// default for the checkpoint they ask for before cancelling the job.
const defaultStopCheckpoint = 2 * time.Minute

// addStopCheckpoint adds launch's and run's --stop-checkpoint flag.
func addStopCheckpoint(fs *flag.FlagSet, d *time.Duration) {
	fs.DurationVar(d, "stop-checkpoint", defaultStopCheckpoint,
		"on SIGINT or SIGTERM (a batch allocation's end), first ask for a checkpoint of the job (it needs a checkpoint.dir) and wait this long for it; 0: cancel at once")
}

// stopCheckpointFirst, for launch and run interrupted, asks for a
// checkpoint of job id and waits up to c.stopCheckpoint for it, saying on
// notices what it does; a second SIGINT or SIGTERM stops the wait. A job
// without a checkpoint.dir, or one not running, is left as it is.
func (c *coordClient) stopCheckpointFirst(id string, notices io.Writer) {
	if c.stopCheckpoint <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.stopCheckpoint)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := c.askCheckpoint(ctx, id)
	if err == nil && s.CheckpointAsked == nil {
		err = fmt.Errorf("job %s: the coordinator did not take the ask", id)
	}
	if err != nil {
		fmt.Fprintf(notices, "\nheterps: stopping without a new checkpoint: %v\n", err)
		return
	}
	fmt.Fprintf(notices, "\nheterps: stopping: writing a checkpoint of job %s at step %d first (up to %s; interrupt again to stop now)\n",
		id, s.CheckpointAsked.Step, c.stopCheckpoint)
	if s, err = c.waitAsked(ctx, s); err != nil {
		fmt.Fprintf(notices, "heterps: stopping without it: %v\n", err)
		return
	}
	fmt.Fprintf(notices, "heterps: checkpoint of step %d written in %s\n", s.Checkpoint.Step, s.Checkpoint.Dir)
}

// checkpointSignals ask launch and run for a checkpoint of their job
// while it goes on: OAR's checkpoint signal (oarsub --checkpoint) is
// SIGUSR2 by default, and Slurm sends what --signal names, e.g. USR1.
var checkpointSignals = []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2}

// askOnSignals asks for a checkpoint of job id each time sigs delivers,
// until ctx ends; it says on notices what came of each ask, without
// waiting for the checkpoint. The returned func waits for it to stop.
func (c *coordClient) askOnSignals(ctx context.Context, id string, sigs <-chan os.Signal, notices io.Writer) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				s, err := c.askCheckpoint(ctx, id)
				switch {
				case err != nil:
					fmt.Fprintf(notices, "\nheterps: %s: no checkpoint asked: %v\n", sig, err)
				case s.CheckpointAsked != nil:
					fmt.Fprintf(notices, "\nheterps: %s: checkpoint of job %s asked for at step %d; training goes on\n", sig, id, s.CheckpointAsked.Step)
				}
			}
		}
	}()
	return func() { <-done }
}
