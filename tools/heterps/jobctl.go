package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/heterps/heterps/daemon/api"
)

// control is a command that acts on one thing of a running coordinator
// (cancel, resize, nodes drain, profile forget): check vets its
// positional arguments, act does the work and returns the thing's status
// and the line that tells the user.
type control[S any] struct {
	name, usage, jsonHelp string
	check                 func(args []string) error
	act                   func(ctx context.Context, c *coordClient, args []string) (S, string, error)
	flags                 func(fs *flag.FlagSet) // the command's own flags, if any
}

// jobControl is a control of a job.
type jobControl = control[api.JobStatus]

// run parses the coordinator's flags and --json, runs act and prints its
// line or, with --json, the status. An error act wraps in usageError
// exits 2, others 1.
func (j control[S]) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var coord coordFlags
	fs := flag.NewFlagSet(j.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	coord.add(fs)
	asJSON := fs.Bool("json", false, j.jsonHelp)
	if j.flags != nil {
		j.flags(fs)
	}
	rest, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		if err = j.check(rest); err != nil {
			err = fmt.Errorf("%w\n%s", err, j.usage)
		}
	}
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	c, err := coord.client()
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	defer c.close()
	c.retryFor(requestRetryFor, stderr)
	s, line, err := j.act(ctx, c, rest)
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, s)
	}
	fmt.Fprintln(stdout, line)
	return exitOK
}
