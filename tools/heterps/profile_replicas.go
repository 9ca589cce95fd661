package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/internal/gctune"
	"github.com/heterps/heterps/internal/tether"
)

// A stage's k replicas, each in a process of its own. Node daemons run a
// stage that way — one heterpsd per node, each with its Go runtime, its
// collector and its threads — and on one machine those processes share the
// cores: two 1-thread nodes on a 2-core VM trained ctrdnn at 76k samples/s
// where the same two replicas as goroutines of one process reached 99k.
// stageRunProcesses measures what the nodes reach: it starts this program
// k times as `heterps profile-replica`, replica 0 hosting the parameter
// server, and the children build the same runner stageRun builds (one
// replica each), tell the parent their addresses over stdout, get everyone
// else's over stdin, train, and report their timed steps.

func init() {
	register("profile-replica", "", runProfileReplica) // started by heterps profile; not for users
}

// replicaHello is a child's first line: where its server (replica 0) and
// its ring transport (allreduce) listen.
type replicaHello struct {
	PS    string `json:"ps,omitempty"`
	Ring  string `json:"ring,omitempty"`
	Error string `json:"error,omitempty"` // it failed before it had them
}

func (h *replicaHello) failure() string { return h.Error }

// replicaPeers is the parent's answer: the server's address and every
// replica's ring address, by replica.
type replicaPeers struct {
	PS   string   `json:"ps"`
	Ring []string `json:"ring,omitempty"`
}

// replicaReport is a child's last line: its timed steps, or why it failed.
type replicaReport struct {
	Run   replicaRun `json:"run"`
	PID   int        `json:"pid"`
	CPUs  string     `json:"cpus,omitempty"` // the CPUs it was pinned to
	Nice  int        `json:"nice"`           // its steps' thread's nice, -1 when not lowered
	Error string     `json:"error,omitempty"`
}

func (r *replicaReport) failure() string { return r.Error }

// replicaLine is a line a child writes, which says so when it failed.
type replicaLine interface{ failure() string }

// replicaArgs are the flags of the child that runs replica i of k, on
// cpus ("": not pinned).
func replicaArgs(s stageSetup, k, i int, cpus string) []string {
	args := []string{"profile-replica", "--model", s.modelRef, "--data", s.data, "--batch", strconv.Itoa(s.batch),
		"--dense-sync", s.denseSync, "--warmup", strconv.Itoa(s.warmup), "--steps", strconv.Itoa(s.steps),
		"--replicas", strconv.Itoa(k), "--replica", strconv.Itoa(i)}
	if cpus != "" {
		args = append(args, "--cpus", cpus)
	}
	if s.pinThreads > 0 && k > 1 { // each waits on the others, as a node's task then does
		args = append(args, "--compute-nice", strconv.Itoa(config.DefaultComputeNice))
	}
	return append(args, s.unitArgs...)
}

// replicaCPUs are the CPUs of each of k replica processes: pinOffers'
// deal of this machine's CPUs, or none when s pins nothing or the CPUs
// are unknown.
func replicaCPUs(s stageSetup, k int) []string {
	out := make([]string, k)
	if s.pinThreads == 0 {
		return out
	}
	allowed, _ := cpuset.Allowed()
	offers := make([]offer, k)
	for i := range offers {
		offers[i] = offer{units: 1, threads: s.pinThreads}
	}
	return pinOffers(offers, allowed)
}

// stageRunProcesses runs s on k replicas, one process each, and times its
// steps as stageRun does.
func stageRunProcesses(ctx context.Context, s stageSetup, k int) (*stageTimes, error) {
	if err := s.splits(k); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	kids, err := startReplicas(ctx, s, k)
	defer kids.stop()
	if err != nil {
		return nil, fmt.Errorf("profile: %d replica processes: %w", k, err)
	}
	reps, err := kids.exchange(ctx)
	if err != nil {
		return nil, fmt.Errorf("profile: %d replica processes, dense_sync %s: %w", k, s.denseSync, err)
	}
	runs, pids := make([]replicaRun, k), make([]int, k)
	cpus, nices := make([]string, k), make([]int, k)
	for i, r := range reps {
		runs[i], pids[i], cpus[i], nices[i] = r.Run, r.PID, r.CPUs, r.Nice
	}
	t := stageTimesOf(runs, s.steps)
	t.pids, t.cpus, t.nices = pids, cpus, nices
	return t, nil
}

// replicaProc is one child: its stdin, the lines it writes, and what it
// says on stderr.
type replicaProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte // closed when its stdout ends
	stderr *capped
}

type replicaProcs []*replicaProc

func startReplicas(ctx context.Context, s stageSetup, k int) (replicaProcs, error) {
	prog, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var kids replicaProcs
	cpus := replicaCPUs(s, k)
	for i := range k {
		p, err := startReplica(ctx, prog, replicaArgs(s, k, i, cpus[i]))
		if err != nil {
			return kids, fmt.Errorf("replica %d: %w", i, err)
		}
		kids = append(kids, p)
	}
	return kids, nil
}

func startReplica(ctx context.Context, prog string, args []string) (*replicaProc, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), asHeterpsEnv+"=1")
	cmd.WaitDelay = 5 * time.Second
	p := &replicaProc{cmd: cmd, lines: make(chan []byte, 2), stderr: &capped{limit: 64 << 10}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := tether.Start(cmd); err != nil {
		return nil, err
	}
	go readLines(stdout, p.lines)
	return p, nil
}

// asHeterpsEnv tells the program started as a replica that it is heterps:
// a test binary's TestMain then runs the command instead of the tests.
const asHeterpsEnv = "HETERPS_TEST_AS_CLI"

// readLines sends r's lines to out and closes it when r ends or has
// written more than 1 MiB in all (a child writes two short lines).
func readLines(r io.Reader, out chan<- []byte) {
	defer close(out)
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return
		}
		out <- raw
	}
}

// exchange reads every child's hello, sends them all the addresses, and
// collects their reports; it then closes their stdin, which lets them go.
func (kids replicaProcs) exchange(ctx context.Context) ([]replicaReport, error) {
	peers := replicaPeers{}
	for i, p := range kids {
		var h replicaHello
		if err := p.next(ctx, &h); err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		if i == 0 {
			peers.PS = h.PS
		}
		if h.Ring != "" {
			peers.Ring = append(peers.Ring, h.Ring)
		}
	}
	msg, err := json.Marshal(peers)
	if err != nil {
		return nil, err
	}
	for i, p := range kids {
		if _, err := p.stdin.Write(append(msg, '\n')); err != nil {
			return nil, fmt.Errorf("replica %d: %w%s", i, err, p.said())
		}
	}
	reps, err := kids.reports(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range kids {
		p.stdin.Close()
	}
	return reps, kids.wait()
}

// reports collects every child's report, returning at the first failure:
// the others may be waiting on the failed one's pushes.
func (kids replicaProcs) reports(ctx context.Context) ([]replicaReport, error) {
	type got struct {
		i   int
		rep replicaReport
		err error
	}
	ch := make(chan got, len(kids))
	for i, p := range kids {
		go func() {
			var rep replicaReport
			err := p.next(ctx, &rep)
			ch <- got{i, rep, err}
		}()
	}
	reps := make([]replicaReport, len(kids))
	for range kids {
		g := <-ch
		if g.err != nil {
			return nil, fmt.Errorf("replica %d: %w", g.i, g.err)
		}
		reps[g.i] = g.rep
	}
	return reps, nil
}

// next decodes the child's next line into v, and returns the failure the
// line reports, if any.
func (p *replicaProc) next(ctx context.Context, v replicaLine) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting for the replica: %w%s", ctx.Err(), p.said())
	case line, ok := <-p.lines:
		if !ok {
			return fmt.Errorf("the replica ended its output early%s", p.said())
		}
		if err := json.Unmarshal(line, v); err != nil {
			return fmt.Errorf("the replica wrote %.200q: %w", line, err)
		}
		if msg := v.failure(); msg != "" {
			return errors.New(msg)
		}
		return nil
	}
}

// said is the end of what the child wrote on stderr, for an error.
func (p *replicaProc) said() string {
	s := strings.TrimSpace(p.stderr.String())
	if s == "" {
		return ""
	}
	return ": " + lastLines(s, 5)
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "; ")
}

// wait waits for every child to exit and names one that failed.
func (kids replicaProcs) wait() error {
	var errs []error
	for i, p := range kids {
		if err := p.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("replica %d exited: %w%s", i, err, p.said()))
		}
		p.cmd = nil
	}
	return errors.Join(errs...)
}

// stop kills the children still running and reaps them.
func (kids replicaProcs) stop() {
	for _, p := range kids {
		if p.cmd != nil {
			p.stdin.Close()
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	}
}

// capped keeps the first limit bytes written to it and drops the rest;
// it may be read while the child still writes.
type capped struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func (c *capped) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.limit - c.buf.Len(); room > 0 {
		c.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

// replicaFlags are a child's flags: the stage and which replica it is.
type replicaFlags struct {
	model, data, denseSync         string
	batch, warmup, steps, k, index int
	unitThreads, gpu               int
	cpus                           []int // pinned to these; nil: not pinned
	computeNice                    int   // the steps' thread's nice, above the process's
}

func parseReplicaFlags(args []string) (*replicaFlags, error) {
	f := &replicaFlags{}
	fs := flag.NewFlagSet("profile-replica", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.model, "model", "", "")
	fs.StringVar(&f.data, "data", "", "")
	fs.StringVar(&f.denseSync, "dense-sync", config.DenseSyncPS, "")
	fs.IntVar(&f.batch, "batch", 0, "")
	fs.IntVar(&f.warmup, "warmup", 0, "")
	fs.IntVar(&f.steps, "steps", 0, "")
	fs.IntVar(&f.k, "replicas", 0, "")
	fs.IntVar(&f.index, "replica", -1, "")
	fs.IntVar(&f.unitThreads, "unit-threads", 1, "")
	fs.IntVar(&f.gpu, "gpu", -1, "")
	cpus := fs.String("cpus", "", "")
	fs.IntVar(&f.computeNice, "compute-nice", 0, "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *cpus != "" {
		var err error
		if f.cpus, err = config.ParseCPUList(*cpus); err != nil {
			return nil, fmt.Errorf("--cpus: %w", err)
		}
	}
	if f.computeNice < 0 || f.computeNice > config.MaxComputeNice {
		return nil, fmt.Errorf("--compute-nice %d: want 0 to %d", f.computeNice, config.MaxComputeNice)
	}
	if f.k < 1 || f.index < 0 || f.index >= f.k || f.batch < f.k || f.steps < 1 || f.warmup < 0 || f.unitThreads < 1 {
		return nil, fmt.Errorf("replica %d of %d, batch %d, %d steps after %d, %d threads: out of range", f.index, f.k, f.batch, f.steps, f.warmup, f.unitThreads)
	}
	if f.denseSync != config.DenseSyncPS && f.denseSync != config.DenseSyncAllreduce {
		return nil, fmt.Errorf("--dense-sync %q: want ps or allreduce", f.denseSync)
	}
	return f, nil
}

// runProfileReplica is a child of stageRunProcesses.
func runProfileReplica(args []string) int {
	out := json.NewEncoder(os.Stdout)
	if err := profileReplica(args, os.Stdin, out); err != nil {
		out.Encode(replicaReport{Error: err.Error()})
		fmt.Fprintln(os.Stderr, "heterps profile-replica (one replica of heterps profile's synchronisation runs, which starts it):", err)
		return exitFailure
	}
	return exitOK
}

func profileReplica(args []string, stdin io.Reader, out *json.Encoder) error {
	f, err := parseReplicaFlags(args)
	if err != nil {
		return err
	}
	var pinned []int // what this process now runs on, for the report
	if f.cpus != nil {
		pin := cpuset.Pin // as heterpsd pins a node, which serves others only where it hosts a shard
		if f.index == 0 {
			pin = cpuset.PinServing
		}
		if err := pin(f.cpus); err != nil {
			return fmt.Errorf("--cpus: %w", err)
		}
		pinned, _ = cpuset.Allowed()
	}
	cfg, err := config.LoadModel(f.model)
	if err != nil {
		return err
	}
	setup := stageSetup{model: cfg, data: f.data, batch: f.batch, denseSync: f.denseSync, warmup: f.warmup, steps: f.steps,
		backend: cpuUnits(f.unitThreads)}
	if f.gpu >= 0 {
		setup.backend = gpuUnits(f.gpu)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if f.gpu < 0 { // the collector's slack a node of these threads keeps (heterpsd)
		defer gctune.Start(ctx, gctune.NodeHeadroom(f.unitThreads, runtime.NumCPU()))()
	}
	if lanes := nn.CPULanes(f.unitThreads); f.gpu < 0 && lanes > 1 && f.k > 1 { // a P for the messages, as a node's task of two lanes that waits on others keeps (cpuset.Exchanging)
		defer cpuset.Exchanging(lanes)()
	}
	r := &stageRunner{setup: setup, k: f.k, computeNice: f.computeNice, pinned: pinned}
	defer r.close()
	return r.runReplica(ctx, cancel, f.index, stdin, out)
}

// runReplica builds replica i, trades addresses with the parent, trains,
// reports, and waits for the parent to close stdin (replica 0 serves the
// others' last steps until then). The parent closing stdin early cancels
// the training.
func (r *stageRunner) runReplica(ctx context.Context, cancel func(), i int, stdin io.Reader, out *json.Encoder) error {
	var hello replicaHello
	var err error
	if i == 0 {
		err = r.startShard(ctx)
		hello.PS = r.psAddr
	} else {
		_, _, err = r.declare()
	}
	if err != nil {
		return err
	}
	names := replicaNames(r.k)
	var tr *wire.TCPTransport
	if r.ringed() {
		if tr, err = r.ringTransport(names[i]); err != nil {
			return err
		}
		hello.Ring = tr.Addr().String()
	}
	if err := out.Encode(hello); err != nil {
		return err
	}
	dec := json.NewDecoder(io.LimitReader(stdin, 1<<20))
	var peers replicaPeers
	if err := dec.Decode(&peers); err != nil {
		return fmt.Errorf("reading the peers: %w", err)
	}
	r.psAddr = peers.PS
	if tr != nil {
		if len(peers.Ring) != r.k {
			return fmt.Errorf("%d ring addresses for %d replicas", len(peers.Ring), r.k)
		}
		if err := peerRing(tr, i, names, peers.Ring); err != nil {
			return err
		}
	}
	parentGone := make(chan struct{})
	go func() { // stdin's end: the parent is done with us, or gone
		io.Copy(io.Discard, stdin)
		close(parentGone)
		cancel()
	}()
	w, err := r.worker(i, shareOf(r.setup.batch, r.k), names, tr)
	if err != nil {
		return err
	}
	r.workers = append(r.workers, w)
	run, nice, err := r.runStepsNiced(ctx, w)
	if err != nil {
		return err
	}
	rep := replicaReport{Run: run, PID: os.Getpid(), Nice: nice}
	if r.pinned != nil {
		rep.CPUs = config.FormatCPUList(r.pinned)
	}
	if err := out.Encode(rep); err != nil {
		return err
	}
	<-parentGone
	return nil
}

// runStepsNiced is runSteps on a goroutine of its own whose thread it
// lowers by r.computeNice first, as heterpsd runs a stage task that waits
// on other processes (daemon/node's compute.go says why); the thread exits
// with the goroutine.
// It returns the nice it set, -1 when it set none.
func (r *stageRunner) runStepsNiced(ctx context.Context, w *pipeline.Worker) (replicaRun, int, error) {
	if r.computeNice == 0 {
		run, err := r.runSteps(ctx, w)
		return run, -1, err
	}
	type result struct {
		run  replicaRun
		nice int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		nice, err := cpuset.LowerThreadPriority(r.computeNice)
		if err != nil {
			nice = -1
			fmt.Fprintln(os.Stderr, "heterps profile-replica: the steps run at the process's priority:", err)
		}
		run, err := r.runSteps(ctx, w)
		done <- result{run, nice, err}
	}()
	res := <-done
	return res.run, res.nice, res.err
}
