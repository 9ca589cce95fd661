package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/heterps/heterps/daemon/api"
)

// jobControl is a command that acts on one job of a running coordinator
// (cancel, resize): check vets its positional arguments, act does the
// work and returns the job's status and the line that tells the user.
type jobControl struct {
	name, usage, jsonHelp string
	check                 func(args []string) error
	act                   func(ctx context.Context, c *coordClient, args []string) (api.JobStatus, string, error)
}

// run parses the coordinator's flags and --json, runs act and prints its
// line or, with --json, the status. An error act wraps in usageError
// exits 2, others 1.
func (j jobControl) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var coord coordFlags
	fs := flag.NewFlagSet(j.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	coord.add(fs)
	asJSON := fs.Bool("json", false, j.jsonHelp)
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
