// Command heterpsd is heterps' daemon. With --role=coordinator it serves
// the control plane (package daemon/coord) for a catalog; with --role=node
// it runs a node (package daemon/node) as its node file says. It stops
// cleanly on SIGTERM or SIGINT and then exits 0; a stop that takes more
// than 8 s exits 1 instead, and a second signal kills it at once.
//
//	heterpsd --role=coordinator --catalog catalog.toml --listen 127.0.0.1:7070 [--state-dir DIR] [--secret-file F]
//	heterpsd --role=node --config node.toml [--register-timeout D] [--gc-headroom-mib N]
//
// Either role also takes [--metrics-listen ADDR [--pprof]] [--log-format
// text|json] [--log-file PATH] [--log-level L] (observe.go), and
// [--stop-on-stdin-close] (lifeline.go).
//
// Once serving it prints one line to standard output, the coordinator's
// URL ("coordinator http://127.0.0.1:7070") or the node's addresses ("node
// <name> data 127.0.0.1:7071 ps 127.0.0.1:7171"), so that a parent process
// that asked for port 0 learns the ports; with --metrics-listen a second
// line gives the metrics URL ("metrics http://127.0.0.1:9100"). Logs go to
// standard error, or to --log-file.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/alloc"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/node"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/internal/errlines"
	"github.com/heterps/heterps/internal/gctune"
	"github.com/heterps/heterps/internal/timerslack"
	"github.com/heterps/heterps/native"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // could not serve
	exitUsage   = 2 // bad flags or config
)

// stopGrace is how long the daemon may take to stop cleanly once told to;
// then it exits anyway, so that SIGTERM stops it within 10 s whatever its
// peers do.
const stopGrace = 8 * time.Second

func main() {
	native.FixOpenBLASCore() // may run the daemon again with OPENBLAS_CORETYPE set (same PID)
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain is main but for the exit: the signals end the daemon's context.
func runMain(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runBounded(ctx, stop, stopGrace, stderr, func(ctx context.Context) int {
		return run(ctx, args, stdout, stderr)
	})
}

// runBounded runs serve until it returns, or until grace has passed since
// ctx ended: a clean stop that hangs (a wait no context reaches) then
// gives exitFailure, and main exits, ending serve's goroutine with the
// process. Once ctx ends, unnotify restores the signals' default action,
// so a second SIGTERM or Ctrl-C kills the daemon at once.
func runBounded(ctx context.Context, unnotify func(), grace time.Duration, stderr io.Writer, serve func(context.Context) int) int {
	done := make(chan int, 1)
	go func() { done <- serve(ctx) }()
	select {
	case status := <-done:
		return status
	case <-ctx.Done():
	}
	unnotify()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case status := <-done:
		return status
	case <-timer.C:
		fmt.Fprintf(stderr, "heterpsd: still stopping %v after the signal; exiting anyway\n", grace)
		return exitFailure
	}
}

type flags struct {
	role, config, catalog, listen, secretFile, logLevel string
	stateDir                                            string
	checkConfig                                         string
	apiSecretFile                                       string
	insecureAPI                                         bool
	metricsListen, logFormat, logFile                   string
	tlsCert, tlsKey, tlsCA                              string
	pprof                                               bool
	heartbeat, timeout, registerTimeout                 time.Duration
	allocPolicy                                         string
	allocEpoch                                          time.Duration
	gcHeadroomMiB                                       int
	stopOnStdinClose                                    bool
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	var f flags
	fs := flag.NewFlagSet("heterpsd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.role, "role", "", "coordinator or node")
	fs.StringVar(&f.config, "config", "", "node: the node file (TOML)")
	fs.StringVar(&f.catalog, "catalog", "", "coordinator: the catalog file (TOML)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7070", "coordinator: HTTP listen address (port 0 picks one)")
	fs.StringVar(&f.stateDir, "state-dir", "/var/lib/heterps/coordinator", "coordinator: where its state (jobs, plans, placements, checkpoints, ids) is kept across restarts")
	fs.StringVar(&f.secretFile, "secret-file", "", "coordinator: the cluster secret (the file every node's secret_file holds too), read here: API requests must be signed with it and the data plane is authenticated; empty = plain data plane (loopback only)")
	fs.StringVar(&f.apiSecretFile, "api-secret-file", "", "coordinator: deprecated alias of --secret-file")
	fs.DurationVar(&f.registerTimeout, "register-timeout", 0, "node: give up when no coordinator has answered this long (0: the node file's register_timeout, else wait forever)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "coordinator: this machine's certificate (heterps certs issue): serve the API over mutual TLS; with --tls-key and --tls-ca")
	fs.StringVar(&f.tlsKey, "tls-key", "", "coordinator: the key of --tls-cert (mode 0600)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "coordinator: the cluster CA that signed every node's and client's certificate")
	fs.BoolVar(&f.insecureAPI, "insecure-api", false, "coordinator: serve an unsigned API on a non-loopback address (anyone who reaches it can submit jobs)")
	fs.DurationVar(&f.heartbeat, "heartbeat", coord.DefaultHeartbeatInterval, "coordinator: how often nodes heartbeat")
	fs.DurationVar(&f.timeout, "heartbeat-timeout", 0, "coordinator: how long a silent node stays alive (0: three heartbeats)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", logText, "text or json (log/slog)")
	fs.StringVar(&f.logFile, "log-file", "", "append the logs to this file (created 0600) instead of standard error")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address (port 0 picks one); empty: none")
	fs.BoolVar(&f.pprof, "pprof", false, "also serve net/http/pprof under /debug/pprof/ on the --metrics-listen address")
	fs.StringVar(&f.checkConfig, "check-config", "", "validate this node file or coordinator catalog, say which it is, and exit (0 valid, 2 not)")
	fs.StringVar(&f.allocPolicy, "alloc-policy", coord.AllocOff, "coordinator: how running jobs share units: quality, maxmin, priority, fair, quality-per-cost or off")
	fs.DurationVar(&f.allocEpoch, "alloc-epoch", coord.DefaultAllocEpoch, "coordinator: how often the allocator decides")
	fs.IntVar(&f.gcHeadroomMiB, "gc-headroom-mib", -1, "node: let the Go heap hold this many MiB of garbage beyond the live heap before collecting (0: GOGC's default; -1: 64 when the node's threads cover this machine's CPUs, else 0; a GOGC variable overrides it)")
	fs.BoolVar(&f.stopOnStdinClose, "stop-on-stdin-close", false, "stop as on SIGTERM when standard input closes, once it has carried a byte (heterps launch keeps it open through the remote shell)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case f.checkConfig != "":
	case f.role == "coordinator" && f.catalog == "":
		return nil, errors.New("--role=coordinator needs --catalog")
	case f.role == "node" && f.config == "":
		return nil, errors.New("--role=node needs --config")
	case f.role != "coordinator" && f.role != "node":
		return nil, fmt.Errorf("--role %q: want coordinator or node", f.role)
	case f.registerTimeout < 0:
		return nil, fmt.Errorf("--register-timeout %s: want >= 0", f.registerTimeout)
	case f.gcHeadroomMiB < -1 || f.gcHeadroomMiB > maxGCHeadroomMiB:
		return nil, fmt.Errorf("--gc-headroom-mib %d: want 0..%d, or -1 for the default", f.gcHeadroomMiB, maxGCHeadroomMiB)
	}
	if err := f.mergeSecretFlags(stderr); err != nil {
		return nil, err
	}
	if err := checkAllocFlags(&f); err != nil {
		return nil, err
	}
	return &f, nil
}

// mergeSecretFlags folds the deprecated --api-secret-file into
// --secret-file: one cluster secret, which both signs the API and
// authenticates the data plane (before, --secret-file was only passed on
// to the nodes and --api-secret-file only signed the API, so a coordinator
// given one of them failed jobs at run time on plain vs secret).
func (f *flags) mergeSecretFlags(stderr io.Writer) error {
	if f.apiSecretFile == "" {
		return nil
	}
	fmt.Fprintln(stderr, "heterpsd: --api-secret-file is deprecated: use --secret-file (one cluster secret for the API and the data plane)")
	if f.secretFile != "" && f.secretFile != f.apiSecretFile {
		return fmt.Errorf("--secret-file %s and --api-secret-file %s differ: the cluster has one secret; give only --secret-file", f.secretFile, f.apiSecretFile)
	}
	f.secretFile, f.apiSecretFile = f.apiSecretFile, ""
	return nil
}

// maxGCHeadroomMiB bounds --gc-headroom-mib (64 GiB).
const maxGCHeadroomMiB = 64 << 10

// gcHeadroomMiB is the collector's slack a node keeps (package gctune):
// flag when given (>= 0), else gctune.DefaultHeadroom for a node whose
// threads cover the machine's CPUs, and none for a node that shares them.
// Measured on a 2-core VM (alternated pairs): make run's one 2-thread node
// trained 5.7 % faster with 64 MiB (3 of 4 pairs), while four 1-thread
// nodes on the same 2 cores were 12 % slower with it (4 of 4), their
// heaps taking ten times the page faults.
func gcHeadroomMiB(flag, threads, cpus int) int {
	if flag >= 0 {
		return flag
	}
	return int(gctune.NodeHeadroom(threads, cpus) >> 20)
}

// tuneGC keeps the collector's slack at mib MiB (package gctune: a node's
// step buffers made it collect ~15 times a second) until the returned
// stop is called; an operator's GOGC variable wins.
func tuneGC(ctx context.Context, mib int) (stop func()) {
	return gctune.Start(ctx, uint64(mib)<<20)
}

// run runs the daemon until ctx ends and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	if f.checkConfig != "" {
		return checkConfig(f.checkConfig, stdout, stderr)
	}
	slack, err := timerslack.Current()
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	log, closeLog, err := newLogger(f, stderr)
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	defer closeLog()
	log.Info("timer slack", "slack", slack.String())
	if f.stopOnStdinClose {
		stopOnLifelineCut(ctx, os.Stdin, log)
	}
	if f.role == "coordinator" {
		return runCoordinator(ctx, f, log, stdout, stderr)
	}
	return runNode(ctx, f, log, stdout, stderr)
}

func runCoordinator(ctx context.Context, f *flags, log *slog.Logger, stdout, stderr io.Writer) int {
	cat, err := config.LoadCatalog(f.catalog)
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	tlsCfg, err := coordinatorTLS(f)
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	secret, err := apiSecret(f, tlsCfg != nil)
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	c, err := coord.New(coord.Config{Catalog: cat, StateDir: f.stateDir, HeartbeatInterval: f.heartbeat, HeartbeatTimeout: f.timeout,
		SecretFile: f.secretFile, ControlSecret: secret, TLS: tlsCfg != nil,
		AllocPolicy: f.allocPolicy, AllocEpoch: f.allocEpoch, Logger: log})
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitFailure
	}
	reg := newRegistry()
	metrics, err := startMetrics(f, reg, c.Ready)
	if err == nil {
		err = c.RegisterMetrics(reg)
	}
	defer metrics.stop()
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitFailure
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitFailure
	}
	scheme := "http"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https"
	}
	fmt.Fprintf(stdout, "coordinator %s://%s\n", scheme, ln.Addr())
	printMetricsAddr(stdout, metrics)
	defer startSystemd(ctx, log, coordinatorState(c))()
	if err := c.Serve(ctx, ln); err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitFailure
	}
	return exitOK
}

// coordinatorTLS loads --tls-cert, --tls-key and --tls-ca (all or none).
func coordinatorTLS(f *flags) (*tls.Config, error) {
	if f.tlsCert == "" && f.tlsKey == "" && f.tlsCA == "" {
		return nil, nil
	}
	return wire.LoadTLS(f.tlsCert, f.tlsKey, f.tlsCA)
}

// apiSecret reads the coordinator's --secret-file; without one (or mutual
// TLS, which authenticates every client) it allows only a loopback
// --listen, unless --insecure-api says otherwise.
func apiSecret(f *flags, mutualTLS bool) ([]byte, error) {
	if f.secretFile != "" {
		return wire.LoadSecret(f.secretFile)
	}
	if mutualTLS {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) && !f.insecureAPI {
		return nil, fmt.Errorf("--listen %s is reachable from other machines: give --secret-file (the cluster secret) so that only signed requests are served, or --insecure-api", f.listen)
	}
	return nil, nil
}

func runNode(ctx context.Context, f *flags, log *slog.Logger, stdout, stderr io.Writer) int {
	nf, err := config.LoadNode(f.config)
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	cfg, err := node.ConfigFromFile(nf)
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitUsage
	}
	if cpus := nf.CPUList(); cpus != nil {
		if err := cpuset.Pin(cpus); err != nil { // one P more while it hosts a shard: node.Agent.runPS
			fmt.Fprintf(stderr, "heterpsd: %s: cpus: %v\n", f.config, err)
			return exitUsage
		}
		log.Info("node: pinned to CPUs", "cpus", nf.CPUs, "gomaxprocs", runtime.GOMAXPROCS(0))
	}
	if advice := native.OpenBLASCoreAdvice(); advice != "" {
		log.Warn("node: " + advice)
	}
	defer tuneGC(ctx, gcHeadroomMiB(f.gcHeadroomMiB, cfg.Units*max(cfg.Threads, 1), runtime.NumCPU()))()
	reg, ready := newRegistry(), &readiness{}
	metrics, err := startMetrics(f, reg, ready.check)
	defer metrics.stop()
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitFailure
	}
	cfg.Logger, cfg.Metrics = log, reg
	if f.registerTimeout > 0 {
		cfg.RegisterTimeout = f.registerTimeout
	}
	a, err := node.New(cfg)
	if err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitFailure
	}
	ready.set(a.Ready)
	fmt.Fprintf(stdout, "node %s data %s ps %s\n", nf.Name, a.DataAddr(), a.PSAddr())
	printMetricsAddr(stdout, metrics)
	defer startSystemd(ctx, log, nodeState(a, nf.Coordinator))()
	if err := a.Run(ctx); err != nil {
		errlines.Print(stderr, "heterpsd", err)
		return exitFailure
	}
	return exitOK
}

// checkAllocFlags checks --alloc-policy and --alloc-epoch.
func checkAllocFlags(f *flags) error {
	if f.allocPolicy != coord.AllocOff {
		if _, err := alloc.ParsePolicy(f.allocPolicy); err != nil {
			return fmt.Errorf("--alloc-policy: %w (or %s)", err, coord.AllocOff)
		}
	}
	if f.allocEpoch <= 0 {
		return fmt.Errorf("--alloc-epoch %v: want > 0", f.allocEpoch)
	}
	return nil
}
