// Command heterps is the heterps CLI: plan a model onto heterogeneous
// resources, profile layers, train on this machine, and run or submit
// distributed jobs. Each subcommand lives in its own file and registers
// itself in commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"

	"github.com/heterps/heterps/internal/errlines"
	"github.com/heterps/heterps/internal/timerslack"
	"github.com/heterps/heterps/native"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns the process exit status.
type command struct {
	summary string
	run     func(args []string) int
}

// commands is filled by each subcommand file's init.
var commands = map[string]command{}

// registerStoppable registers a command whose context SIGINT (and the
// other signals given) cancels, writing to the process's stdout and
// stderr.
func registerStoppable(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int, signals ...os.Signal) {
	register(name, summary, func(args []string) int {
		ctx, stop := signal.NotifyContext(context.Background(), append([]os.Signal{os.Interrupt}, signals...)...)
		defer stop()
		return run(ctx, args, os.Stdout, os.Stderr)
	})
}

func register(name, summary string, run func(args []string) int) {
	if _, dup := commands[name]; dup {
		panic("heterps: command registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

// Exit statuses shared by subcommands.
const (
	exitOK         = 0
	exitFailure    = 1   // the job itself failed
	exitUsage      = 2   // bad flags, config or input data
	exitInfeasible = 3   // a plan cannot meet its constraints
	exitInterrupt  = 130 // stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report it)
)

func main() {
	native.FixOpenBLASCore() // may run the program again with OPENBLAS_CORETYPE set
	os.Exit(dispatch(os.Args[1:]))
}

// warnOpenBLASCore tells the user when their OPENBLAS_CORETYPE holds the
// GEMMs of the commands that train (here, or in the daemons they start,
// which inherit it) below this CPU's widest kernels.
func warnOpenBLASCore(stderr io.Writer) {
	if advice := native.OpenBLASCoreAdvice(); advice != "" {
		fmt.Fprintln(stderr, "heterps: warning:", advice)
	}
}

func dispatch(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "heterps: unknown command %q\n\n", args[0])
		usage()
		return exitUsage
	}
	if _, err := timerslack.Current(); err != nil { // the daemons it starts would refuse it too
		errlines.Print(os.Stderr, "heterps", err)
		return exitUsage
	}
	return cmd.run(args[1:])
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: heterps <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if commands[n].summary == "" { // started by another command, not by users
			continue
		}
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'heterps <command> -h' for a command's flags.")
}

// fail prints err for the user and returns status, or the status the error
// itself carries (bad input data says 2).
func fail(status int, err error) int { return failTo(os.Stderr, status, err) }

func failTo(w io.Writer, status int, err error) int {
	var code interface{ ExitStatus() int }
	if errors.As(err, &code) {
		status = code.ExitStatus()
	}
	errlines.Print(w, "heterps", err)
	return status
}
