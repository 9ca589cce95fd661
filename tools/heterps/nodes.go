package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/heterps/heterps/daemon/api"
)

func init() {
	registerStoppable("nodes", "list a running coordinator's nodes; throttle one's CPU share, drain it or put it back", runNodes)
}

const (
	nodesUsage    = "usage: heterps nodes [--coordinator URL] [--secret-file F] [--json]"
	throttleUsage = "usage: heterps nodes throttle NODE SHARE [--coordinator URL] [--secret-file F] [--json]\n" +
		"  NODE is a node's id or the name of a live node; SHARE the fraction of its CPU it is to use (0.01..1)"
	drainUsage = "usage: heterps nodes drain|undrain NODE [--coordinator URL] [--secret-file F] [--json]\n" +
		"  drain takes NODE (an id or a node's name) out of service: nothing new is placed on it, a job that syncs through\n" +
		"  the parameter servers drops its replicas there at once, others run to their end; undrain puts it back"
)

type nodesFlags struct {
	coord coordFlags
	json  bool
	rest  []string
}

func parseNodesFlags(name string, args []string, stderr io.Writer) (*nodesFlags, error) {
	var f nodesFlags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.coord.add(fs)
	fs.BoolVar(&f.json, "json", false, "print JSON")
	var err error
	f.rest, err = parseInterspersed(fs, args)
	return &f, err
}

// runNodes lists the coordinator's nodes, or with "throttle" first,
// throttles one (runThrottle).
func runNodes(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "throttle":
			return runThrottle(ctx, args[1:], stdout, stderr)
		case "drain", "undrain":
			return runDrain(ctx, args[0] == "drain", args[1:], stdout, stderr)
		}
	}
	f, err := parseNodesFlags("nodes", args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil && len(f.rest) > 0 {
		err = fmt.Errorf("unexpected argument %q\n%s\n%s\n%s", f.rest[0], nodesUsage, throttleUsage, drainUsage)
	}
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	c, err := f.coord.client()
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	defer c.close()
	c.retryFor(requestRetryFor, stderr)
	nodes, err := c.nodes(ctx)
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	if f.json {
		return printJSON(stdout, stderr, nodes)
	}
	printNodes(stdout, nodes)
	return exitOK
}

func printNodes(w io.Writer, nodes []api.NodeStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tname\ttype\tunits\tcpu share\tmode\tstate\ttasks")
	for _, n := range nodes {
		mode := n.CPUShareMode
		if mode == "" {
			mode = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", n.ID, n.Name, n.Type, n.Units, shareText(n), mode, stateText(n), taskList(n))
	}
	tw.Flush()
}

// runDrain takes a node out of service (on) or puts it back.
func runDrain(ctx context.Context, on bool, args []string, stdout, stderr io.Writer) int {
	return control[api.NodeStatus]{name: "nodes drain", usage: drainUsage, jsonHelp: "print the node's status as JSON",
		check: func(args []string) error {
			if len(args) != 1 || args[0] == "" {
				return fmt.Errorf("want one NODE, got %q", args)
			}
			return nil
		},
		act: func(ctx context.Context, c *coordClient, args []string) (api.NodeStatus, string, error) {
			var s api.NodeStatus
			err := c.PostJSON(ctx, "/v1/nodes/"+url.PathEscape(args[0])+"/drain", api.DrainRequest{Drain: on}, &s)
			return s, fmt.Sprintf("node %s (%s): %s", s.Name, s.ID, serviceText(s)), err
		}}.run(ctx, args, stdout, stderr)
}

// serviceText says whether a node is in service: "in service",
// "draining (2 tasks left)" or "drained".
func serviceText(n api.NodeStatus) string {
	switch {
	case !n.Draining:
		return "in service"
	case len(n.Tasks) > 0:
		return fmt.Sprintf("draining (%d tasks left)", len(n.Tasks))
	}
	return "drained"
}

// stateText is a node's state with its service: "alive", "alive,
// drained", "dead (...)".
func stateText(n api.NodeStatus) string {
	s := string(n.State)
	if n.Reason != "" {
		s += " (" + n.Reason + ")"
	}
	if n.Draining {
		s += ", " + serviceText(n)
	}
	return s
}

// taskList is a node's tasks, comma-separated, or "-".
func taskList(n api.NodeStatus) string {
	if len(n.Tasks) == 0 {
		return "-"
	}
	return strings.Join(n.Tasks, ",")
}

// shareText is the share a node applies, and the one asked for when it
// has not applied it yet: "1 -> 0.25".
func shareText(n api.NodeStatus) string {
	s := strconv.FormatFloat(n.CPUShare, 'g', 4, 64)
	if n.CPUShareRequested != 0 && n.CPUShareRequested != n.CPUShare {
		s += " -> " + strconv.FormatFloat(n.CPUShareRequested, 'g', 4, 64)
	}
	return s
}

// runThrottle asks the coordinator to change a live node's CPU share; the
// node applies it at its next heartbeat.
func runThrottle(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseNodesFlags("nodes throttle", args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var req api.ThrottleRequest
	if err == nil {
		req, err = parseThrottle(f.rest)
	}
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	c, err := f.coord.client()
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	defer c.close()
	c.retryFor(requestRetryFor, stderr)
	s, err := c.throttle(ctx, f.rest[0], req)
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	if f.json {
		return printJSON(stdout, stderr, s)
	}
	if s.CPUShareRequested != s.CPUShare {
		fmt.Fprintf(stdout, "node %s (%s): cpu share %g asked; it runs at %g (%s) until its next heartbeat\n",
			s.Name, s.ID, s.CPUShareRequested, s.CPUShare, s.CPUShareMode)
	} else {
		fmt.Fprintf(stdout, "node %s (%s): cpu share %g (%s)\n", s.Name, s.ID, s.CPUShare, s.CPUShareMode)
	}
	return exitOK
}

// parseThrottle reads NODE SHARE.
func parseThrottle(rest []string) (api.ThrottleRequest, error) {
	if len(rest) != 2 {
		return api.ThrottleRequest{}, fmt.Errorf("want NODE and SHARE, got %d argument(s)\n%s", len(rest), throttleUsage)
	}
	share, err := strconv.ParseFloat(rest[1], 64)
	if err != nil {
		return api.ThrottleRequest{}, fmt.Errorf("share %q: not a number\n%s", rest[1], throttleUsage)
	}
	req := api.ThrottleRequest{CPUShare: share}
	if err := req.Validate(); err != nil {
		return api.ThrottleRequest{}, fmt.Errorf("share: %w", err)
	}
	return req, nil
}

func (c *coordClient) throttle(ctx context.Context, node string, req api.ThrottleRequest) (api.NodeStatus, error) {
	var s api.NodeStatus
	err := c.PostJSON(ctx, "/v1/nodes/"+url.PathEscape(node)+"/throttle", req, &s)
	return s, err
}
