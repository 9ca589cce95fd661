package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// wireParts are the benchmarks --wire runs before the training runs, as
// child processes from the repository root, their output copied in: the
// transport's bandwidth against raw TCP and the PS push/pull
// micro-benchmark against single-process table access.
var wireParts = [][]string{
	{"go", "run", "./bench/dist/wirebw"},
	{"go", "test", "./daemon/ps", "-run", "^$", "-bench", "PushPull", "-benchtime", "500x"},
}

// runParts runs each command with its stdout going to w (stderr to ours),
// a blank line after each.
func runParts(ctx context.Context, parts [][]string, w io.Writer) error {
	for _, p := range parts {
		cmd := exec.CommandContext(ctx, p[0], p[1:]...)
		cmd.Stdout, cmd.Stderr = w, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(p, " "), err)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// pass is one more set of distributed runs, on another unit type.
type pass struct {
	unit  string
	nodes []int
}

// parsePasses parses --also: semicolon-separated UNIT:NODES entries, NODES
// a comma-separated list, e.g. "cpu-2t:1".
func parsePasses(list string) ([]pass, error) {
	var out []pass
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	for entry := range strings.SplitSeq(list, ";") {
		unit, nodes, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok || unit == "" {
			return nil, fmt.Errorf("--also %q: entry %q: want UNIT:NODES, e.g. cpu-2t:1", list, entry)
		}
		n, err := positiveInts("--also "+strconv.Quote(entry), nodes)
		if err != nil {
			return nil, err
		}
		out = append(out, pass{unit: unit, nodes: n})
	}
	return out, nil
}
