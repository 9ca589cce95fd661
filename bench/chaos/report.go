package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// printTable prints one row per scenario, then each scenario's notes.
func printTable(w io.Writer, results []*result) {
	fmt.Fprintf(w, "\n%-24s %10s %13s %8s %10s %-18s %-14s\n", "scenario", "recovery s", "trained twice", "restarts", "generation", "final loss (ref)", "bit-identical")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(w, "%-24s FAILED: %v\n", r.name, r.err)
			continue
		}
		if r.name == "overhead" {
			fmt.Fprintf(w, "%-24s %10s %13s %8s %10s %-18s %-14s\n", r.name, "-", "-", "-", "-", "-", "-")
			continue
		}
		fmt.Fprintf(w, "%-24s %10s %13s %8d %10d %-18s %-14s\n", r.name, seconds(r.recovery), count(r.twice), r.restarts, r.generation,
			fmt.Sprintf("%.4f (%.4f)", r.loss, r.refLoss), r.identical)
	}
	fmt.Fprintln(w, "\nnotes:")
	for _, r := range results {
		for _, n := range r.notes {
			fmt.Fprintf(w, "  %s: %s\n", r.name, n)
		}
	}
}

// printTargets prints each target with what we measured and whether it
// was met; it asserts nothing.
func printTargets(w io.Writer, results []*result) {
	fmt.Fprintln(w, "\ntargets:")
	var worst time.Duration
	var which []string
	faults := 0
	for _, r := range results {
		if r.name == "none" || r.name == "overhead" {
			continue
		}
		faults++
		switch {
		case r.err != nil:
			which = append(which, r.name+" failed")
		case r.recovery < 0:
			which = append(which, r.name+" never recovered")
		default:
			worst = max(worst, r.recovery)
			if r.recovery >= recoveryTarget {
				which = append(which, fmt.Sprintf("%s %.1f s", r.name, r.recovery.Seconds()))
			}
		}
	}
	if faults > 0 {
		fmt.Fprintf(w, "  recovery < %v for every fault: %s (slowest %.1f s)%s\n", recoveryTarget, verdict(len(which) == 0), worst.Seconds(), listed(which))
	}
	for _, r := range results {
		what, lossless := noStepLost[r.name]
		switch {
		case lossless && r.err == nil:
			fmt.Fprintf(w, "  0 steps lost %s: %s (%d trained twice, %d restarts)\n", what, verdict(r.twice == 0 && r.restarts == 0), r.twice, r.restarts)
		case lossless:
			fmt.Fprintf(w, "  0 steps lost %s: MISSED (the scenario failed)\n", what)
		case r.name == "sigstop-coordinator-long" && r.err == nil:
			fmt.Fprintf(w, "  a coordinator stopped past the lease: the job fails over to a checkpoint and ends on the undisturbed values: %s (%d restarts, %s)\n",
				verdict(r.restarts >= 1 && strings.HasPrefix(r.identical, "yes")), r.restarts, r.identical)
		case r.name == "sigstop-coordinator-long":
			fmt.Fprintf(w, "  a coordinator stopped past the lease: MISSED (the scenario failed)\n")
		case r.name == "overhead" && r.err == nil:
			pct := overheadPct(r.plain, r.checked)
			fmt.Fprintf(w, "  checkpoint overhead < %.1f %% (CheckFreq's bound): ours %.1f %%: %s\n", overheadBound, pct, verdict(pct < overheadBound))
		case r.name == "overhead":
			fmt.Fprintf(w, "  checkpoint overhead < %.1f %% (CheckFreq's bound): MISSED (the scenario failed)\n", overheadBound)
		}
	}
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

func listed(which []string) string {
	if len(which) == 0 {
		return ""
	}
	return ": " + strings.Join(which, ", ")
}

func seconds(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", d.Seconds())
}

func count(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// noStepLost names the scenarios whose job must lose no step: no restart,
// no step trained twice.
var noStepLost = map[string]string{
	"coordinator":         "for a coordinator kill",
	"sigstop-coordinator": "when the coordinator stops within the nodes' lease",
	"grow":                "growing a stage onto a node in place",
	"grow-coordinator":    "when the coordinator dies right after a grow",
}
