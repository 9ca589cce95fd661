package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/internal/tether"
)

func init() {
	registerStoppable("run", "run a job on this machine: a coordinator and node daemons on loopback", runRun, syscall.SIGTERM)
}

type runFlags struct {
	job, catalog, heterpsd, logDir string
	nodes                          int
	json                           bool
	heartbeat, timeout             time.Duration
	stopCheckpoint                 time.Duration
	pin                            bool
}

func parseRunFlags(args []string, stderr io.Writer) (*runFlags, error) {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.catalog, "catalog", "local", "resource catalog: a file, or a built-in one ("+strings.Join(config.ExampleNames(config.ExampleCatalogs), ", ")+"); its [[node]] offers say which node daemons to start")
	fs.IntVar(&f.nodes, "nodes", 0, "start this many node daemons, cycling through the catalog's offers (0: one per offer)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object with the outcome")
	fs.StringVar(&f.heterpsd, "heterpsd", "", "the daemon binary (default: heterpsd beside this binary, else on PATH)")
	fs.StringVar(&f.logDir, "log-dir", "", "write the daemons' logs here (default: a temporary directory, removed unless the job fails once submitted)")
	fs.DurationVar(&f.heartbeat, "heartbeat", 200*time.Millisecond, "node heartbeat interval")
	fs.DurationVar(&f.timeout, "timeout", 0, "give up (and cancel the job) after this long; 0 = never")
	addStopCheckpoint(fs, &f.stopCheckpoint)
	fs.BoolVar(&f.pin, "pin", true, "pin each node daemon to as many of this machine's CPUs as it has threads, dealt in turn (cpus in its node file; one as large as the machine is not pinned)")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if len(rest) != 1 {
		return nil, errors.New("usage: heterps run JOB [--catalog C] [--nodes N] [--json]  (JOB: a job file, or a built-in job: " +
			strings.Join(config.ExampleNames(config.ExampleJobs), ", ") + ")")
	}
	if f.nodes < 0 || f.nodes > maxLocalDaemons {
		return nil, fmt.Errorf("--nodes %d: want 0..%d (each is a process on this machine; heterps launch starts a cluster's)", f.nodes, maxLocalDaemons)
	}
	f.job = rest[0]
	return &f, nil
}

// maxLocalDaemons bounds the node daemons heterps run starts: each is a
// process of this machine with its own listeners and memory.
const maxLocalDaemons = 256

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseRunFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	job, err := readJob(f.job)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	cat, err := config.LoadCatalog(f.catalog)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	bin, err := findHeterpsd(f.heterpsd)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	warnOpenBLASCore(stderr)
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	offers := nodeOffers(cat, f.nodes)
	if len(offers) > maxLocalDaemons {
		return failTo(stderr, exitUsage, fmt.Errorf("catalog %s: its offers make %d node daemons, want at most %d on this machine (pick fewer with --nodes; heterps launch starts a cluster's)",
			f.catalog, len(offers), maxLocalDaemons))
	}
	s, err := runLocal(ctx, f, bin, job, offers, stderr)
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	return reportJob(stdout, stderr, s, f.json)
}

// findHeterpsd returns the daemon binary: the flag's, else heterpsd beside
// this executable, else on PATH.
func findHeterpsd(flagPath string) (string, error) {
	if flagPath != "" {
		return flagPath, nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "heterpsd")
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("heterpsd"); err == nil {
		return p, nil
	}
	return "", errors.New("no heterpsd beside heterps or on PATH: build it (go build -o bin/ ./daemon/cmd/heterpsd ./tools/heterps) or pass --heterpsd")
}

// offer is one node daemon to start: the type it offers and its units.
type offer struct {
	name, typ      string
	units, threads int
	gpus           bool // a GPU type: the daemon's units are GPUs gpu..gpu+units-1
	gpu            int  // its first GPU's ordinal on its host
}

// onePerGPU splits a GPU type's offer of k units into k daemons of one GPU
// each, named name.gpuN, the next GPUs of the host from next on (next is
// advanced): a stage task runs on one GPU (the coordinator gives a node
// that names several one unit a stage), so the k GPUs of a stage are k
// replicas on k daemons. Other offers are returned as they are.
func onePerGPU(o offer, next *int) []offer {
	if !o.gpus {
		return []offer{o}
	}
	out := make([]offer, o.units)
	for i := range out {
		g := o
		g.units, g.gpu, g.name = 1, *next, fmt.Sprintf("%s.gpu%d", o.name, *next)
		*next++
		out[i] = g
	}
	return out
}

// typeOffer is a daemon offering units units of catalog type typ: its
// threads per unit from the type's name (threadsSuffix), and whether it
// trains on GPUs (runsOnGPUs).
func typeOffer(cat *config.Catalog, typ string, units int) offer {
	o := offer{typ: typ, units: units, threads: 1, gpus: runsOnGPUs(cat, typ)}
	if m := threadsSuffix.FindStringSubmatch(typ); m != nil {
		o.threads, _ = strconv.Atoi(m[1])
	}
	return o
}

// threadsSuffix reads the threads of a CPU unit from a type name such as
// "cpu-2t" (the local catalog's convention: a unit is a worker with that
// many threads); other types get one thread per unit.
var threadsSuffix = regexp.MustCompile(`-(\d+)t$`)

// nodeOffers lists the daemons to start: one per type of each catalog
// [[node]] (a daemon offers one type), or one per type with one unit when
// the catalog lists no nodes; with n > 0, n daemons cycling through those.
// A GPU type's offer becomes one daemon per GPU, numbered across the run
// (all on this machine).
func nodeOffers(cat *config.Catalog, n int) []offer {
	var base []offer
	for _, nd := range cat.Nodes {
		for _, typ := range slices.Sorted(maps.Keys(nd.Units)) {
			base = append(base, offer{name: nd.Name + "." + typ, typ: typ, units: nd.Units[typ]})
		}
	}
	if len(base) == 0 {
		for _, t := range cat.Types {
			base = append(base, offer{name: "local." + t.Name, typ: t.Name, units: 1})
		}
	}
	out := base
	if n > 0 {
		out = nil
		for i := range n {
			o := base[i%len(base)]
			o.name = fmt.Sprintf("node%d.%s", i, o.typ)
			out = append(out, o)
		}
	}
	var split []offer
	nextGPU := 0 // every daemon runs on this machine
	for _, o := range out {
		t := typeOffer(cat, o.typ, o.units)
		t.name = o.name
		split = append(split, onePerGPU(t, &nextGPU)...)
	}
	return split
}

// runLocal starts a coordinator and the node daemons as child processes,
// submits the job and waits for it; the children are stopped before it
// returns, whatever happens.
func runLocal(ctx context.Context, f *runFlags, bin string, job jobText, offers []offer, stderr io.Writer) (api.JobStatus, error) {
	var none api.JobStatus
	dir, keep, err := logDirectory(f.logDir, "heterps-run-")
	if err != nil {
		return none, err
	}
	// Each daemon in a process group of its own: Ctrl-C at a terminal
	// signals the whole foreground group, and daemons that stopped with
	// heterps would leave nobody to write the checkpoint it asks for first.
	// The lifeline stops them where the kernel does not (tether) when
	// heterps dies outright.
	kids := children{ownGroup: true, lifelines: true}
	failed := true
	defer func() {
		kids.stop()
		if !keep && !failed {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(stderr, "heterps run: daemon logs in %s\n", dir)
		}
	}()
	coordLog := filepath.Join(dir, "coordinator.log")
	coordArgs := func(listen string) []string {
		return []string{"--role=coordinator", "--catalog", f.catalog, "--listen", listen,
			"--heartbeat", f.heartbeat.String(), "--state-dir", filepath.Join(dir, "state"), "--stop-on-stdin-close"}
	}
	line, err := kids.start(ctx, bin, coordLog, coordArgs("127.0.0.1:0")...)
	if err != nil {
		return none, err
	}
	url, ok := strings.CutPrefix(line, "coordinator ")
	if !ok {
		return none, fmt.Errorf("heterpsd coordinator said %q", line)
	}
	// A coordinator that dies comes back on its port and state directory,
	// where the node daemons find it again and it takes up the job.
	revive := func(ctx context.Context) error {
		listen := strings.TrimPrefix(url, "http://")
		line, err := kids.restartFirst(ctx, coordArgs(listen)...)
		if err == nil && line != "coordinator "+url {
			err = fmt.Errorf("the restarted coordinator said %q, want %q", line, "coordinator "+url)
		}
		return err
	}
	// Every node daemon is started before any is waited for, as heterps
	// launch starts them.
	waits := make([]func(context.Context) (string, error), len(offers))
	cpus := make([]string, len(offers))
	if f.pin {
		allowed, _ := cpuset.Allowed() // none known: none pinned
		cpus = pinOffers(offers, allowed)
	}
	for i, o := range offers {
		path := filepath.Join(dir, o.name+".toml")
		if err := os.WriteFile(path, appendCPUs(nodeFile(o, url), cpus[i]), 0o600); err != nil {
			return none, err
		}
		if waits[i], err = kids.spawn(bin, filepath.Join(dir, o.name+".log"), "--role=node", "--config", path, "--stop-on-stdin-close"); err != nil {
			return none, err
		}
	}
	if err := awaitFirstLines(ctx, waits); err != nil {
		return none, err
	}
	c := newCoordClient(url)
	defer c.close()
	c.stopCheckpoint = f.stopCheckpoint
	s, err := runJob(ctx, c, &kids, len(offers), job, stderr, "heterps run", url, &reviver{coordinator: revive, nodeAfter: nodeRestartDelay(f.heartbeat)})
	if err != nil {
		failed = !refusedSubmission(err) // a refused job file never ran: the refusal says all
		return none, err
	}
	failed = s.State != api.JobDone
	return s, nil
}

// runJob waits for n node daemons to register with the coordinator that
// c calls, submits the job and follows it until it ends; what names the
// command in its notices.
//
// revive, when not nil, starts the daemons again that die (kids' first
// child is the coordinator): the job goes on, up to daemonRestarts
// times a daemon in daemonRestartWindow.
func runJob(ctx context.Context, c *coordClient, kids *children, n int, job jobText, stderr io.Writer, what, url string, revive *reviver) (api.JobStatus, error) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, checkpointSignals...) // kept for the job from here on, not the default (exit)
	defer signal.Stop(sigs)
	if err := waitNodes(ctx, c, n, kids); err != nil {
		return api.JobStatus{}, err
	}
	id, err := c.submit(ctx, job)
	if err != nil {
		return api.JobStatus{}, err
	}
	fmt.Fprintf(stderr, "%s: job %s on %d node daemon(s) and a coordinator at %s\n", what, id, n, url)
	actx, stopAsks := context.WithCancel(ctx)
	waitAsks := c.askOnSignals(actx, id, sigs, stderr)
	update, done := jobProgress(stderr)
	s, err := waitReviving(ctx, c, kids, id, update, stderr, what, revive)
	done()
	stopAsks()
	waitAsks()
	return s, err
}

// Restarts of a dead daemon that one run allows: a coordinator that keeps
// dying (a corrupt state, a machine out of memory) ends the run, a node
// daemon that does is left dead.
const (
	daemonRestarts      = 3
	daemonRestartWindow = 10 * time.Minute
)

// restartLimit holds each daemon's restarts of the last
// daemonRestartWindow, by the daemon's log (which names it).
type restartLimit map[string][]time.Time

// take counts a restart of the daemon logging to log and returns its
// number in the window, or 0 when the window holds daemonRestarts
// already (nothing is counted then).
func (l restartLimit) take(log string) int {
	times := slices.DeleteFunc(l[log], func(t time.Time) bool { return time.Since(t) > daemonRestartWindow })
	if len(times) == daemonRestarts {
		l[log] = times
		return 0
	}
	l[log] = append(times, time.Now())
	return len(l[log])
}

// reviver is how heterps run starts its daemons again: the coordinator by
// a function that knows its port, the node daemons with their own
// arguments once nodeAfter has passed since they died.
type reviver struct {
	coordinator func(context.Context) error
	nodeAfter   time.Duration
}

// nodeRestartDelay is how long a dead node daemon waits to be started
// again: until the coordinator, hearing no heartbeat for three, has let
// go of its name, which a new daemon of the name could not register under
// before.
func nodeRestartDelay(heartbeat time.Duration) time.Duration {
	return 4*heartbeat + 500*time.Millisecond
}

// waitReviving is waitUnqueued, starting the coordinator again (revive)
// when a call fails because it has died, and, with revive, node daemons
// that have died as it polls the job.
func waitReviving(ctx context.Context, c *coordClient, kids *children, id string, update func(api.JobStatus), notices io.Writer, what string, revive *reviver) (api.JobStatus, error) {
	limit := restartLimit{}
	onStatus, returning := update, func() bool { return false }
	if revive != nil {
		nodes := &nodeReviver{kids: kids, notices: notices, what: what, after: revive.nodeAfter,
			limit: limit, deadSince: map[string]time.Time{}, given: map[string]bool{}}
		onStatus = func(s api.JobStatus) {
			nodes.reviveDead()
			update(s)
		}
		returning = nodes.returning
	}
	for {
		s, err := waitUnqueued(ctx, c, id, onStatus, notices, returning)
		if err == nil || revive == nil || ctx.Err() != nil {
			return s, err
		}
		dead := kids.firstExited(time.Second)
		if dead == nil {
			return s, err
		}
		n := limit.take(dead.log)
		if n == 0 {
			return s, fmt.Errorf("the coordinator exited (%s), %d times in %v; not restarted again (log: %s): %w",
				dead.cmd.ProcessState, daemonRestarts+1, daemonRestartWindow, dead.log, err)
		}
		fmt.Fprintf(notices, "\n%s: the coordinator exited (%s); starting it again on its state (restart %d of at most %d in %v)\n",
			what, dead.cmd.ProcessState, n, daemonRestarts, daemonRestartWindow)
		if err := revive.coordinator(ctx); err != nil {
			return s, fmt.Errorf("restarting the coordinator: %w", err)
		}
	}
}

// waitUnqueued waits for job id on a cluster whose nodes have all
// registered and that runs nothing else: a job that has to wait for units
// would wait forever, so it is cancelled and its reason returned.
// A job queued while returning reports a node daemon on its way back is
// waited for instead.
func waitUnqueued(ctx context.Context, c *coordClient, id string, update func(api.JobStatus), notices io.Writer, returning func() bool) (api.JobStatus, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var queued string
	s, err := c.waitJob(wctx, id, func(s api.JobStatus) {
		if s.State == api.JobQueued && !returning() {
			queued = s.Reason
			stop()
		}
		update(s)
	}, notices)
	if queued != "" && ctx.Err() == nil {
		return s, fmt.Errorf("job %s cannot be placed on the nodes started for it: %s", id, queued)
	}
	return s, err
}

// nodeReviver starts again the node daemons of heterps run that die (its
// children after the first, the coordinator), each up to
// daemonRestarts times in daemonRestartWindow: a job with
// checkpoint.restarts goes on on the others meanwhile and moves back up
// when its node is back, as on a cluster whose daemons systemd restarts.
type nodeReviver struct {
	kids      *children
	notices   io.Writer
	what      string
	after     time.Duration // from a daemon's death to its restart
	limit     restartLimit
	deadSince map[string]time.Time // when a daemon was first seen dead, by its log
	given     map[string]bool      // daemons not restarted again, said once
	last      time.Time            // the latest death seen or restart
}

// nodeReturnWait is how long after a node daemon's restart a queued job is
// taken to wait for it (it registers within a few heartbeats).
const nodeReturnWait = 30 * time.Second

// returning reports whether a node daemon died or was restarted lately.
func (r *nodeReviver) returning() bool { return time.Since(r.last) < nodeReturnWait }

// reviveDead restarts each node daemon that has exited, within its limit.
func (r *nodeReviver) reviveDead() {
	for i := 1; i < len(r.kids.procs); i++ {
		c := r.kids.procs[i]
		select {
		case <-c.exited:
		default:
			continue
		}
		if r.given[c.log] {
			continue
		}
		if _, seen := r.deadSince[c.log]; !seen {
			r.deadSince[c.log], r.last = time.Now(), time.Now()
		}
		if time.Since(r.deadSince[c.log]) < r.after {
			continue
		}
		delete(r.deadSince, c.log)
		name := strings.TrimSuffix(filepath.Base(c.log), ".log")
		n := r.limit.take(c.log)
		if n == 0 {
			r.given[c.log] = true
			fmt.Fprintf(r.notices, "\n%s: node daemon %s exited (%s), %d times in %v; not restarted again (log: %s)\n",
				r.what, name, c.cmd.ProcessState, daemonRestarts+1, daemonRestartWindow, c.log)
			continue
		}
		r.last = time.Now()
		fmt.Fprintf(r.notices, "\n%s: node daemon %s exited (%s); starting it again (restart %d of at most %d in %v)\n",
			r.what, name, c.cmd.ProcessState, n, daemonRestarts, daemonRestartWindow)
		if _, err := r.kids.restart(i, nil); err != nil {
			fmt.Fprintf(r.notices, "%s: restarting node daemon %s: %v\n", r.what, name, err)
		}
	}
}

// nodeFile is a node daemon's file for an offer.
func nodeFile(o offer, coordinator string) []byte {
	b := fmt.Appendf(nil, "version = 1\nname = %q\ncoordinator = %q\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = %q\nunits = %d\nthreads = %d\nplain = true\n",
		o.name, coordinator, o.typ, o.units, o.threads)
	return appendGPUs(b, o)
}

// appendCPUs adds the cpus line of a daemon pinned to cpus (none when
// empty).
func appendCPUs(b []byte, cpus string) []byte {
	if cpus == "" {
		return b
	}
	return fmt.Appendf(b, "cpus = %q\n", cpus)
}

// appendGPUs adds the gpus line of a GPU type's daemon: its host's GPUs
// from o.gpu on, one per unit, which the daemon checks against its
// inventory before it registers.
func appendGPUs(b []byte, o offer) []byte {
	if !o.gpus {
		return b
	}
	ordinals := make([]string, o.units)
	for i := range ordinals {
		ordinals[i] = strconv.Itoa(o.gpu + i)
	}
	return fmt.Appendf(b, "gpus = [%s]\n", strings.Join(ordinals, ", "))
}

// runsOnGPUs says whether a daemon of type typ trains on GPUs: a GPU type of
// a catalog that does not emulate its GPUs on CPU-only nodes.
func runsOnGPUs(cat *config.Catalog, typ string) bool {
	t, ok := cat.Type(typ)
	return ok && t.Kind == config.KindGPU && !cat.EmulateGPUs
}

// waitNodes waits until n nodes are alive, or a daemon exits.
func waitNodes(ctx context.Context, c *coordClient, n int, kids *children) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes, err := c.nodes(ctx)
		alive := 0
		for _, nd := range nodes {
			if nd.State == api.NodeAlive {
				alive++
			}
		}
		switch {
		case err == nil && alive >= n:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case kids.exited() != nil:
			k := kids.exited()
			return fmt.Errorf("%s exited while the nodes registered: %s (log: %s)", strings.Join(k.cmd.Args, " "), lastLine(k.log), k.log)
		case time.Now().After(deadline):
			return fmt.Errorf("%d of %d node daemons registered within 30 s (last error: %v)", alive, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// children are the daemons runLocal started.
type children struct {
	procs   []*child
	logs    []*os.File
	readers sync.WaitGroup // of the children's standard outputs and exits
	// ownGroup starts each child in a process group of its own, so that
	// Ctrl-C reaches only heterps, which then stops them in order.
	ownGroup bool
	// lifelines gives each child a pipe on its standard input that has
	// carried a line and stays open until stop: the daemons (heterpsd
	// --stop-on-stdin-close; heterps launch's remote shells pass it on)
	// stop when it closes with this process.
	lifelines bool
	held      []*os.File // the pipes' write ends
}

// lastLine is the last non-empty line of a daemon's log, where a daemon
// that gives up writes why; at most 64 KiB of the file's end are read.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "its log cannot be read"
	}
	defer f.Close()
	const tail = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, tail))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return last
	}
	return "its log is empty"
}

// child is a started daemon; exited is closed once it has exited.
type child struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// exited returns a child that has exited, if one has.
func (k *children) exited() *child {
	for _, c := range k.procs {
		select {
		case <-c.exited:
			return c
		default:
		}
	}
	return nil
}

// start runs the daemon with args, its standard error into logPath, and
// returns the first line it prints (its addresses) once it has.
func (k *children) start(ctx context.Context, bin, logPath string, args ...string) (string, error) {
	firstLine, err := k.spawn(bin, logPath, args...)
	if err != nil {
		return "", err
	}
	return firstLine(ctx)
}

// awaitFirstLines waits for the first line of each spawned daemon.
func awaitFirstLines(ctx context.Context, waits []func(context.Context) (string, error)) error {
	for _, firstLine := range waits {
		if _, err := firstLine(ctx); err != nil {
			return err
		}
	}
	return nil
}

// restartFirst starts the first child again, one that has exited, with
// args, and returns the first line it prints.
func (k *children) restartFirst(ctx context.Context, args ...string) (string, error) {
	firstLine, err := k.restart(0, args)
	if err != nil {
		return "", err
	}
	return firstLine(ctx)
}

// restart starts child i again, one that has exited, with args (nil: its
// own), its standard error appended to its log, in its place among k's
// children, and returns the wait for its first line.
func (k *children) restart(i int, args []string) (firstLine func(context.Context) (string, error), err error) {
	old := k.procs[i]
	if args == nil {
		args = old.cmd.Args[1:]
	}
	logf, err := os.OpenFile(old.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	n := len(k.procs)
	firstLine, err = k.spawnInto(logf, old.cmd.Path, old.log, args...)
	if len(k.procs) > n {
		k.procs[i] = k.procs[n]
		k.procs = k.procs[:n]
	}
	return firstLine, err
}

// firstExited returns the first child if it has exited or exits within d.
func (k *children) firstExited(d time.Duration) *child {
	if len(k.procs) == 0 {
		return nil
	}
	select {
	case <-k.procs[0].exited:
		return k.procs[0]
	case <-time.After(d):
		return nil
	}
}

// spawn runs the daemon with args, its standard error into logPath, and
// returns the wait for the first line it prints: at most 30 s from the
// call.
func (k *children) spawn(bin, logPath string, args ...string) (firstLine func(context.Context) (string, error), err error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	return k.spawnInto(logf, bin, logPath, args...)
}

// spawnInto is spawn with the log file open, which k then owns.
func (k *children) spawnInto(logf *os.File, bin, logPath string, args ...string) (firstLine func(context.Context) (string, error), err error) {
	k.logs = append(k.logs, logf)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	if k.ownGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if k.lifelines {
		if cmd.Stdin, err = k.lifeline(); err != nil {
			return nil, err
		}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	// A heterps killed outright takes its daemons with it.
	err = tether.Start(cmd)
	pw.Close() // the child holds its own copy
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &child{cmd: cmd, log: logPath, exited: make(chan struct{})}
	k.procs = append(k.procs, c)
	k.readers.Go(func() {
		cmd.Wait()
		close(c.exited)
	})
	lines := make(chan string, 1)
	k.readers.Go(func() { // ends when the child exits and its standard output closes
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		} else {
			close(lines)
		}
		io.Copy(io.Discard, pr)
	})
	deadline := time.Now().Add(30 * time.Second)
	return func(ctx context.Context) (string, error) {
		select {
		case line, ok := <-lines:
			if !ok {
				return "", fmt.Errorf("%s %s exited before serving: %s (log: %s)", bin, strings.Join(args, " "), lastLine(logPath), logPath)
			}
			return line, nil
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Until(deadline)):
			return "", fmt.Errorf("%s %s printed nothing in 30 s; see %s", bin, strings.Join(args, " "), logPath)
		}
	}, nil
}

// lifeline returns the read end of a pipe that has carried a line and
// whose write end k holds until stop; the child gets its own copy.
func (k *children) lifeline() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	k.held = append(k.held, w)
	k.logs = append(k.logs, r) // closed by stop, like the logs
	if _, err := w.Write([]byte("\n")); err != nil {
		return nil, err
	}
	return r, nil
}

// stop stops the children: the node daemons first, so that their last
// heartbeats still reach the coordinator, then the coordinator (the first
// child). Each gets SIGTERM and, after a grace period, SIGKILL.
func (k *children) stop() {
	if len(k.procs) > 1 {
		terminate(k.procs[1:])
	}
	if len(k.procs) > 0 {
		terminate(k.procs[:1])
	}
	k.readers.Wait()
	for _, f := range append(k.logs, k.held...) {
		f.Close()
	}
}

func terminate(procs []*child) {
	for _, c := range procs {
		c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range procs {
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			c.cmd.Process.Kill()
			<-c.exited
		}
	}
}

// logDirectory returns where the daemons' logs go: dir, created if need
// be and kept, or a fresh temporary directory named prefix* that the
// caller removes unless the job fails (keep false).
func logDirectory(dir, prefix string) (path string, keep bool, err error) {
	if dir == "" {
		path, err = os.MkdirTemp("", prefix)
		return path, false, err
	}
	return dir, true, os.MkdirAll(dir, 0o755)
}
