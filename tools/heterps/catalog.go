package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/internal/errlines"
)

func init() {
	register("catalog", "make synthetic resource catalogs or problems; check catalog files", func(args []string) int {
		return runCatalog(args, os.Stdout, os.Stderr)
	})
}

const catalogUsage = `usage: heterps catalog synth --types N [--seed S] [--problem --layers L]
       heterps catalog check FILE...`

func runCatalog(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, catalogUsage)
		return exitUsage
	}
	switch args[0] {
	case "synth":
		return runCatalogSynth(args[1:], stdout, stderr)
	case "check":
		return runCatalogCheck(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, catalogUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "heterps catalog: unknown subcommand %q\n%s\n", args[0], catalogUsage)
	return exitUsage
}

// runCatalogSynth prints a synthetic catalog: CPU cores and types-1 GPU
// types, one GPU model at different speeds and prices, as in the HeterPS
// paper's simulations; with --problem, a problem file estimated for a
// ctrdnn-like model on that catalog.
func runCatalogSynth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("catalog synth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	types := fs.Int("types", 4, fmt.Sprintf("number of types, 1..%d (type 0 is CPU cores)", sched.MaxSynthTypes))
	seed := fs.Uint64("seed", 1, "seed of speeds and prices")
	problem := fs.Bool("problem", false, "print a problem file instead of a catalog")
	layers := fs.Int("layers", 8, "with --problem: layers of the ctrdnn-like model (>= 3)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	var (
		doc interface{ MarshalTOML() ([]byte, error) }
		err error
	)
	if *problem {
		doc, err = sched.SynthProblem(*types, *layers, *seed)
	} else {
		doc, err = sched.SynthCatalog(*types, *seed)
	}
	if err != nil {
		errlines.Print(stderr, "heterps catalog synth", err)
		return exitUsage
	}
	out, err := doc.MarshalTOML()
	if err != nil {
		errlines.Print(stderr, "heterps catalog synth", err)
		return exitFailure
	}
	kind := "catalog"
	if *problem {
		kind = fmt.Sprintf("problem: a ctrdnn-like model of %d layers, times estimated (roofline) on the catalog of", *layers)
	}
	fmt.Fprintf(stdout, "# Synthetic %s `heterps catalog synth --types %d --seed %d`.\n", kind, *types, *seed)
	fmt.Fprintf(stdout, "# GPU types are one reference GPU at different speeds and prices; not real hardware.\n")
	stdout.Write(out)
	return exitOK
}

// runCatalogCheck validates catalog files.
func runCatalogCheck(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, catalogUsage)
		return exitUsage
	}
	status := exitOK
	for _, path := range args {
		c, err := config.LoadCatalog(path)
		if err != nil {
			errlines.Print(stderr, "heterps catalog check", err)
			status = exitUsage
			continue
		}
		units := 0
		for _, n := range c.Nodes {
			for _, u := range n.Units {
				units += u
			}
		}
		fmt.Fprintf(stdout, "%s: ok, %d types, %d nodes offering %d units\n", path, len(c.Types), len(c.Nodes), units)
	}
	return status
}
