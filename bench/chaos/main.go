// Command chaos kills each role of a live heterps cluster and measures how
// the job recovers. For every scenario it starts a fresh loopback cluster of
// real processes, built from this tree into a temporary directory: a
// coordinator (its own state directory, a fixed port) and four node
// daemons of one 1-thread CPU unit each (a catalog of its own: local.toml's
// cpu-1t with max_units 4), with a short lease. It submits ctrdnn on
// synthetic data, BSP, planned as one data-parallel stage on three units
// (the fourth node is a spare), checkpointing every 100 steps with
// automatic restarts, and then:
//
//   - none: runs it undisturbed: the reference steps/s, loss and final
//     checkpoint;
//   - coordinator: kill -9 of the coordinator at 40 % of the steps, restarted
//     a second later on the same address and state directory;
//   - stage-node: kill -9 of a stage replica's node that holds no PS shard
//     (the job should go on elastic, without it);
//   - ps-node: kill -9 of the node holding the PS shard (the job should
//     restart from its latest checkpoint as a new job);
//   - sigstop-stage / sigstop-ps: SIGSTOP of a node for longer than its lease
//     plus the coordinator's heartbeat timeout, then SIGCONT: what the
//     coordinator did, and whether the stopped node wrote a checkpoint file
//     after it was fenced;
//   - grow: no fault; at 40 % of the steps the job is grown onto the spare
//     node in place (PATCH /v1/jobs/{id} with add, a quarter of the batch
//     each): the step the replica joins at, how long until the job runs
//     past it with the four replicas, and that nothing trained twice;
//   - grow-coordinator: the same grow, and kill -9 of the coordinator as
//     soon as it has answered, before the spare node's next heartbeat
//     fetches its task, restarted a second later;
//   - overhead: the job without [checkpoint] beside the one with it, the mean
//     step time of each and the overhead of checkpointing, on jobs of
//     --overhead-steps (a job's span is known to a heartbeat, so short
//     jobs cannot show a few per cent).
//
// Recovery is measured from the fault until the coordinator's API reports a
// step beyond the one it reported at the fault (node reports arrive once a
// heartbeat, so the figure is coarse by about a second). The final
// checkpoint is compared with the reference run's: file by file (manifest
// SHA-256, which includes the job id in each file's metadata) and by the
// trained values (every parameter and optimiser state, table rows in id
// order). It prints a table and the targets; it measures and never
// asserts, and a scenario that fails says why and leaves its daemons' logs.
//
// With --dense-sync allreduce the stage syncs its dense parameters by
// allreduce: a dead replica's node then restarts the job from its latest
// checkpoint instead of shrinking the stage.
//
//	go run ./bench/chaos [--steps 1500] [--batch 256] [--dense-sync ps|allreduce] [--scenarios none,coordinator,...] [--out bench/results/chaos.txt]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/native"
)

const (
	modelName = "ctrdnn"
	dataSpec  = "synthetic:1"
	unitType  = "cpu-1t"
	jobUnits  = 3 // the plan's replicas; one more node is a spare
	nodes     = jobUnits + 1
	// Targets.
	recoveryTarget = 15 * time.Second
	overheadBound  = 3.5 // %, CheckFreq's bound on checkpoint overhead
)

// How long sigstop-coordinator and sigstop-coordinator-long stop the
// coordinator.
const (
	defaultCoordStop     = 4 * time.Second
	defaultCoordLongStop = 12 * time.Second
)

// options are the command's flags.
type options struct {
	steps, batch, every int
	overheadSteps       int
	restarts            int
	faultAt             float64
	stopFor             time.Duration
	coordStopFor        time.Duration
	coordLongStopFor    time.Duration
	overheadRuns        int
	scenarios           []string
	keep                bool
	out, catalog        string
	denseSync           string
	timeout             time.Duration
}

// allScenarios is every scenario, in the order they run.
var allScenarios = []string{"none", "coordinator", "sigstop-coordinator", "sigstop-coordinator-long", "stage-node", "ps-node", "sigstop-stage", "sigstop-ps", "grow", "grow-coordinator", "overhead"}

func main() {
	native.FixOpenBLASCore() // the header then names the kernels the daemons it starts run
	var o options
	flag.IntVar(&o.steps, "steps", 1500, "training steps of every job")
	flag.IntVar(&o.batch, "batch", 256, "samples per step (split over the stage's replicas)")
	flag.IntVar(&o.every, "every", 100, "checkpoint every this many steps")
	flag.IntVar(&o.restarts, "restarts", 3, "checkpoint.restarts of the job")
	flag.Float64Var(&o.faultAt, "fault-at", 0.4, "inject each fault once the job has done this fraction of its steps")
	flag.DurationVar(&o.stopFor, "stop-for", 6*time.Second, "how long the sigstop scenarios keep the node stopped (more than lease + heartbeat timeout)")
	flag.DurationVar(&o.coordStopFor, "coordinator-stop-for", defaultCoordStop, "how long sigstop-coordinator keeps the coordinator stopped (more than a heartbeat timeout, less than the nodes' lease there, node.DefaultLease)")
	flag.DurationVar(&o.coordLongStopFor, "coordinator-long-stop-for", defaultCoordLongStop, "how long sigstop-coordinator-long keeps the coordinator stopped (more than the nodes' lease, loopback.Lease)")
	flag.IntVar(&o.overheadSteps, "overhead-steps", 6000, "training steps of the overhead scenario's jobs: a job's span is known to a heartbeat, so the runs must be long for the overhead to show")
	flag.IntVar(&o.overheadRuns, "overhead-runs", 2, "runs with and without checkpoints in the overhead scenario (best of them; the reference run counts as one with)")
	scen := flag.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
	flag.StringVar(&o.out, "out", "bench/results/chaos.txt", "also write the output to this file (empty: stdout only)")
	flag.StringVar(&o.catalog, "catalog", "config/examples/catalogs/local.toml", "catalog whose "+unitType+" type the nodes offer")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up on a scenario's job after this long")
	flag.BoolVar(&o.keep, "keep", false, "keep the daemons' logs and files even when every scenario succeeds")
	flag.StringVar(&o.denseSync, "dense-sync", "ps", "the job's dense_sync: ps (the stage shrinks in place when a replica's node dies) or allreduce (it restarts from a checkpoint)")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := parseScenarios(&o, *scen)
	if err == nil {
		err = run(ctx, o)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/chaos:", err)
		os.Exit(1)
	}
}

func parseScenarios(o *options, list string) error {
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		if !contains(allScenarios, s) {
			return fmt.Errorf("--scenarios: unknown scenario %q (want some of %s)", s, strings.Join(allScenarios, ","))
		}
		o.scenarios = append(o.scenarios, s)
	}
	switch {
	case o.steps < 2*o.every:
		return fmt.Errorf("--steps %d: want at least two checkpoints (--every %d)", o.steps, o.every)
	case o.faultAt <= 0 || o.faultAt >= 1:
		return fmt.Errorf("--fault-at %g: want a fraction in (0, 1)", o.faultAt)
	case o.overheadRuns < 1:
		return fmt.Errorf("--overhead-runs %d: want >= 1", o.overheadRuns)
	case o.overheadSteps < 2*o.every:
		return fmt.Errorf("--overhead-steps %d: want at least two checkpoints (--every %d)", o.overheadSteps, o.every)
	case o.denseSync != "ps" && o.denseSync != "allreduce":
		return fmt.Errorf("--dense-sync %q: want ps or allreduce", o.denseSync)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// bench is what every scenario shares: the binaries, the catalog, the
// plan's throughput floor and where the output goes.
type bench struct {
	o        options
	dir      string // temporary: binaries, and a directory per scenario run
	heterpsd string
	catalog  []byte
	limit    float64
	w        io.Writer
	runs     int // scenario runs so far, naming their directories
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "bench-chaos-")
	if err != nil {
		return err
	}
	w, err := header.Begin(o.out, header.Collect("bench/chaos"))
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	b := &bench{o: o, dir: dir, w: w}
	if err := b.prepare(ctx); err != nil {
		os.RemoveAll(dir)
		return err
	}
	b.header()
	results := b.runAll(ctx)
	printTable(w, results)
	printTargets(w, results)
	failed := false
	for _, r := range results {
		failed = failed || r.err != nil
	}
	switch {
	case failed:
		fmt.Fprintf(os.Stderr, "bench/chaos: a scenario failed; the daemons' logs are in %s\n", dir)
	case o.keep:
		fmt.Fprintf(os.Stderr, "bench/chaos: the daemons' logs are in %s\n", dir)
	default:
		os.RemoveAll(dir)
	}
	if err := w.Close(); err != nil { // the load average after, and the results file written whole
		return fmt.Errorf("record the output: %w", err)
	}
	return ctx.Err()
}

// prepare builds heterpsd, writes the catalog and finds the floor.
func (b *bench) prepare(ctx context.Context) error {
	setup, err := loopback.Prepare(ctx, b.dir, b.o.catalog, unitType, "chaos", modelName, dataSpec, nodes, jobUnits, b.o.batch, b.o.steps)
	b.heterpsd, b.catalog, b.limit = setup.Heterpsd, setup.Catalog, setup.Limit
	return err
}

// header says what runs where: machine, load, versions and the setup.
func (b *bench) header() {
	fmt.Fprintf(b.w, "job: %s on %s, BSP, %d steps of batch %d, plan limit %.0f samples/s -> one data-parallel stage on %d units, dense_sync = %q; checkpoint every %d steps, restarts = %d\n",
		modelName, dataSpec, b.o.steps, b.o.batch, b.limit, jobUnits, b.o.denseSync, b.o.every, b.o.restarts)
	fmt.Fprintf(b.w, "cluster per scenario: heterpsd coordinator (fresh state dir, fixed port, --heartbeat %v: dead after 3 missed) + %d node daemons of 1x %s (1 thread), plain loopback, lease = %q; faults at %.0f %% of the steps\n",
		loopback.Heartbeat, nodes, unitType, loopback.Lease.String(), 100*b.o.faultAt)
	fmt.Fprintln(b.w, "recovery: from the fault until the API reports a step past the highest it showed within 2 heartbeats of the fault, or")
	fmt.Fprintln(b.w, "within a heartbeat of an elastic resize (node reports come once a heartbeat, so the step shown at the fault lags);")
	fmt.Fprintln(b.w, "for a stopped coordinator, from its SIGCONT (nothing can act on the job before; sigstop-coordinator's nodes keep lease =")
	fmt.Fprintf(b.w, "%q, longer than its stop, and sigstop-coordinator-long stops it for longer than the lease);\n", leaseOf("sigstop-coordinator").String())
	fmt.Fprintln(b.w, "trained twice: the step shown at the fault minus")
	fmt.Fprintln(b.w, "the checkpoint step the restarted job resumed from;")
	fmt.Fprintln(b.w, "bit-identical: the final checkpoint against the undisturbed run's, \"yes (files)\" when every file's SHA-256 in the")
	fmt.Fprintln(b.w, "manifest matches, \"yes (values)\" when every parameter and optimiser state does (table rows in id order; the files")
	fmt.Fprintln(b.w, "also differ between two undisturbed runs, in row order and metadata)")
	fmt.Fprintln(b.w)
}

// jobTOML is the job file of a job of steps; every = 0 leaves out
// [checkpoint].
func (b *bench) jobTOML(ckptDir string, every, steps int) []byte {
	job := fmt.Appendf(nil, "version = 1\nname = \"chaos\"\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\nmode = \"bsp\"\nseed = 1\ndense_sync = %q\n",
		modelName, dataSpec, b.o.batch, steps, b.limit, b.o.denseSync)
	if every > 0 {
		job = fmt.Appendf(job, "[checkpoint]\ndir = %q\nevery = %d\nrestarts = %d\n", ckptDir, every, b.o.restarts)
	}
	return job
}
