package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/apiclient"
	"github.com/heterps/heterps/daemon/retry"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// Config configures a node daemon.
type Config struct {
	Name        string
	Coordinator string // the coordinator's URL
	// Listen is where stage links are served (the wire transport) and
	// PSListen where parameter-server shards are; port 0 picks a free port.
	// The node registers the addresses it is bound to.
	Listen, PSListen string
	Type             string // the catalog type it offers
	Units            int
	Threads          int // CPU threads per unit; 0 = 1
	// GPUs are a GPU type's devices, driver ordinals, one per unit (the
	// node file's gpus; gpus.go): stage tasks then run on the CUDA
	// backend. Empty for a CPU type.
	GPUs   []int
	Secret []byte
	Plain  bool // no secret: loopback only
	// TCPOnly keeps the data plane on TCP between processes of one host
	// (wire.Config.TCPOnly).
	TCPOnly bool
	// SocketOnly keeps same-host payloads in the socket, not in shared
	// memory (wire.Config.NoSharedMemory).
	SocketOnly bool
	// TLS, if set, is the node's mutual-TLS configuration (wire.LoadTLS):
	// its data plane runs in TLS and it reaches the coordinator over https.
	TLS *tls.Config
	// PSMemory is the memory budget in bytes of each parameter-server
	// shard the node hosts (ps.Config.MemoryBytes); 0 = unlimited.
	PSMemory int64
	// CPUShare is the fraction of its CPU the node gives its work at the
	// start (throttle.go); a throttle from the coordinator changes it.
	// 0 = 1.
	CPUShare float64
	// ComputeNice is how many nice levels below the daemon's priority a
	// stage's kernels run (compute.go); 0 = at the daemon's priority.
	ComputeNice int

	// ReadyTimeout bounds how long a stage waits for its partners and
	// parameter servers to come up; 0 = DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// StepTimeout bounds one training step; 0 = the pipeline's default.
	StepTimeout time.Duration
	// Lease is how long the node keeps its tasks running while it cannot
	// reach the coordinator; past it, it stops them (and writes no more
	// checkpoint files), since the coordinator may have given their work
	// to other nodes. 0 = DefaultLease.
	Lease time.Duration
	// RegisterTimeout bounds how long Run tries to register the first
	// time before it gives up with an error; 0 = it keeps trying.
	RegisterTimeout time.Duration
	Logger          *slog.Logger
	// Metrics, if set, gets the node's metrics (metrics.go).
	Metrics prometheus.Registerer
}

// Defaults.
const (
	DefaultReadyTimeout = time.Minute
	DefaultLease        = config.DefaultLease
)

// ConfigFromFile turns a node file into a Config, reading its secret.
func ConfigFromFile(n *config.Node) (Config, error) {
	cfg := Config{Name: n.Name, Coordinator: n.Coordinator, Listen: n.Listen, PSListen: n.PSListen, Type: n.Type,
		Units: n.Units, Threads: n.Threads, GPUs: n.GPUs, Plain: n.Plain, TCPOnly: n.TCPOnly, SocketOnly: n.SocketOnly, Lease: n.Lease.Duration, PSMemory: int64(n.PSMemory),
		RegisterTimeout: n.RegisterTimeout.Duration}
	if n.CPUShare != nil {
		cfg.CPUShare = *n.CPUShare
	}
	if n.ComputeNice != nil {
		cfg.ComputeNice = *n.ComputeNice
	}
	if n.SecretFile != "" {
		secret, err := wire.LoadSecret(n.SecretFile)
		if err != nil {
			return Config{}, err
		}
		cfg.Secret = secret
	}
	if n.TLS() {
		t, err := wire.LoadTLS(n.TLSCert, n.TLSKey, n.TLSCA)
		if err != nil {
			return Config{}, err
		}
		cfg.TLS = t
	}
	return cfg, nil
}

// Agent is a running node daemon: its listeners, its registration with the
// coordinator and the tasks the coordinator gave it.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	ctl       control
	http      *http.Transport
	transport *wire.TCPTransport
	peers     *peerSet
	ps        *psHost
	dataAddr  string
	psAddr    string
	throttle  *cpuThrottle
	gpus      *gpuPool
	noCgroup  error // why the throttle cannot use the cgroup
	obs       observer

	mu    sync.Mutex
	tasks map[string]*task
	// ownStops counts the times the node stopped its tasks on its own
	// (its lease ran out); stopsRegistered is the count its latest
	// registration was made at. While they agree the node holds every
	// task it was handed, and registering again it names its previous id
	// (api.RegisterRequest.Previous).
	ownStops, stopsRegistered int
	wg                        sync.WaitGroup // task goroutines
	lease                     lease
}

// New opens the node's listeners. Run then registers and serves; it closes
// them when it returns.
func New(cfg Config) (*Agent, error) {
	if cfg.Threads <= 0 {
		cfg.Threads = 1
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.CPUShare == 0 {
		cfg.CPUShare = 1
	}
	if err := api.CheckCPUShare("cpu_share", cfg.CPUShare); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	if cfg.Units*cfg.Threads > native.MaxThreads && len(cfg.GPUs) == 0 {
		return nil, fmt.Errorf("node %s: %d units of %d threads: a stage's kernels split across at most %d threads", cfg.Name, cfg.Units, cfg.Threads, native.MaxThreads)
	}
	if cfg.ComputeNice < 0 || cfg.ComputeNice > config.MaxComputeNice {
		return nil, fmt.Errorf("node %s: compute nice %d, want 0..%d", cfg.Name, cfg.ComputeNice, config.MaxComputeNice)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Coordinator != "" { // host:port means http://host:port
		u, err := config.CoordinatorURL(cfg.Coordinator)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
		}
		cfg.Coordinator = u
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), tasks: map[string]*task{}, lease: newLease(cfg.Lease),
		http: &http.Transport{MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second}, gpus: newGPUPool(cfg.GPUs)}
	if cfg.TLS != nil {
		a.http.TLSClientConfig = cfg.TLS.Clone() // the server name comes from the coordinator's URL
	}
	a.ctl = control{client: apiclient.New(cfg.Coordinator, &http.Client{Transport: a.http, Timeout: 30 * time.Second})}
	if cfg.Secret != nil {
		a.ctl.client.Key = api.ControlKey(cfg.Secret)
	}
	cg, err := findCgroupCPU(procSelfCgroup, cgroupV2Root, os.Getpid(), min(cfg.Units*cfg.Threads, runtime.NumCPU()))
	a.throttle, a.noCgroup = newCPUThrottle(cg), err
	if err := a.observe(cfg.Metrics); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	if err := a.listen(); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	return a, nil
}

// listen starts the wire transport, whose node id is its own address (what
// the coordinator gives partners to reach it), and the PS listener.
func (a *Agent) listen() error {
	addr, err := concreteAddr(a.cfg.Listen)
	if err != nil {
		return err
	}
	a.transport, err = wire.NewTCPTransport(addr, a.wireConfig(addr))
	if err != nil {
		return err
	}
	a.dataAddr = a.transport.Addr().String()
	ln, err := wire.Listen(a.cfg.PSListen, a.wireConfig("ps@"+a.dataAddr))
	if err != nil {
		a.transport.Close()
		return err
	}
	a.psAddr = ln.Addr().String()
	a.peers = newPeerSet(a.transport)
	a.ps = newPSHost(ln, a.cfg.ReadyTimeout, a.log)
	return nil
}

// concreteAddr returns addr with port 0 replaced by a port free now: the
// transport's node id is its address, which must be known before it
// listens.
func concreteAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen %q: %w", addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("listen %q: %w", addr, err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (a *Agent) wireConfig(id string) wire.Config {
	return wire.Config{NodeID: id, Secret: a.cfg.Secret, Plain: a.cfg.Plain, TCPOnly: a.cfg.TCPOnly, NoSharedMemory: a.cfg.SocketOnly, TLS: a.cfg.TLS, Logger: a.log, Metrics: a.obs.wire}
}

// DataAddr is the address of the node's stage links; PSAddr that of its
// parameter-server shards.
func (a *Agent) DataAddr() string { return a.dataAddr }

// PSAddr is the address of the node's parameter-server listener.
func (a *Agent) PSAddr() string { return a.psAddr }

// Run registers with the coordinator and heartbeats, running the tasks of
// each reply, until ctx ends. It then cancels the tasks, waits for them,
// sends a last heartbeat that reports them abandoned, closes the listeners
// and returns nil. A coordinator that forgets the node (410 or 404: it
// restarted, or declared the node dead) gets a new registration that
// reports the tasks still running, which it adopts if their jobs still
// run there; the reply to the next heartbeat stops the others. One that
// cannot be reached is retried, the tasks running on until the lease runs
// out; one that refuses the registration (an unknown type, say) ends Run
// with the reason.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { a.ps.serve(ctx) })
	a.applyShare(a.cfg.CPUShare)
	a.logShare("cpu share")
	defer func() {
		cancel() // also when Run ends on its own
		wg.Wait()
		a.ps.close()
		a.transport.Close()
		if err := a.throttle.close(); err != nil {
			a.log.Warn("cpu share: restoring the cgroup's cpu.max", "err", err)
		}
		a.log.Info("stopped")
	}()

	inv, err := TakeInventory()
	if err != nil {
		a.log.Warn("inventory", "err", err)
	}
	if err := checkOwnGPUs(a.cfg, cudaBuild, inv.GPUs, err); err != nil {
		a.shutdown("")
		return fmt.Errorf("refusing to register: %w", err)
	}
	for _, g := range a.cfg.GPUs {
		d := inv.GPUs[g] // checkOwnGPUs checked the ordinal
		a.log.Info("gpu", "ordinal", g, "name", d.Name, "memory_bytes", d.MemoryBytes, "multiprocessors", d.Multiprocessors, "driver", d.Driver, "uuid", d.UUID)
	}
	req := api.RegisterRequest{Name: a.cfg.Name, DataAddr: a.dataAddr, PSAddr: a.psAddr, Type: a.cfg.Type,
		Units: a.cfg.Units, Cores: inv.Cores, MemoryBytes: inv.MemoryBytes, GPUs: inv.GPUs, GPUDevices: a.cfg.GPUs,
		LeaseMS: a.cfg.Lease.Milliseconds()}
	id, previous := "", ""
	a.logWaiting()
	deadline := a.registerDeadline()
	for ctx.Err() == nil {
		var interval time.Duration
		id, interval, err = a.register(ctx, req, previous, deadline)
		deadline = time.Time{} // only the first registration gives up: later, the lease rules
		if err != nil {
			a.shutdown("")
			return fmt.Errorf("node %s: register: %w", a.cfg.Name, err)
		}
		if id == "" {
			break
		}
		err := a.heartbeatLoop(ctx, id, interval)
		if ctx.Err() != nil {
			break
		}
		a.log.Warn("registering again", "err", err)
		id, previous = "", id
	}
	a.shutdown(id)
	return nil
}

// logWaiting says that the node is not serving yet: it waits for its
// coordinator, until register_timeout or for ever.
func (a *Agent) logWaiting() {
	limit := "none: waiting until one answers (set register_timeout in the node file to give up)"
	if a.cfg.RegisterTimeout > 0 {
		limit = a.cfg.RegisterTimeout.String()
	}
	a.log.Info("waiting for coordinator", "coordinator", a.cfg.Coordinator, "register_timeout", limit)
}

func (a *Agent) registerDeadline() time.Time {
	if a.cfg.RegisterTimeout <= 0 {
		return time.Time{}
	}
	return time.Now().Add(a.cfg.RegisterTimeout)
}

// errRegisterTimeout: no coordinator answered within RegisterTimeout.
var errRegisterTimeout = errors.New("no coordinator answered")

// register registers base with the node's tasks and share as they are at
// each try, retrying with backoff until it succeeds, ctx ends (then the
// id is empty), the coordinator refuses it, or deadline (when not zero)
// passes. previous is the id the daemon held before ("" at first).
func (a *Agent) register(ctx context.Context, base api.RegisterRequest, previous string, deadline time.Time) (string, time.Duration, error) {
	backoff := registerRetry.Start()
	for {
		req, stops := a.registration(base, previous)
		sent := time.Now()
		resp, err := a.ctl.register(ctx, req)
		switch {
		case err == nil:
			a.registered(stops)
			a.lease.renew(sent)
			a.obs.registered(resp.NodeID)
			a.log.Info("registered", "id", resp.NodeID, "data", a.dataAddr, "ps", a.psAddr, "reported_tasks", len(req.Tasks))
			return resp.NodeID, max(time.Duration(resp.HeartbeatIntervalMS)*time.Millisecond, 10*time.Millisecond), nil
		case errors.Is(err, errRejected):
			return "", 0, err
		}
		a.log.Warn("register", "err", err)
		a.checkLease()
		wait, _ := backoff.Next()
		if !deadline.IsZero() && time.Now().Add(wait).After(deadline) {
			return "", 0, fmt.Errorf("%w at %s within register_timeout %s: %w", errRegisterTimeout, a.cfg.Coordinator, a.cfg.RegisterTimeout, err)
		}
		if retry.Sleep(ctx, wait) != nil {
			return "", 0, nil
		}
	}
}

// registration is base with the node's task reports, its CPU share and,
// while it has stopped no task on its own since it last registered, the
// id it held then; stops is the count of such stops it was made at.
func (a *Agent) registration(base api.RegisterRequest, previous string) (req api.RegisterRequest, stops int) {
	req = base
	req.CPUShare, req.CPUShareMode = a.throttle.state()
	a.mu.Lock()
	defer a.mu.Unlock()
	req.Tasks = a.reportsLocked()
	if a.ownStops == a.stopsRegistered {
		req.Previous = previous
	}
	return req, a.ownStops
}

// registered records that a registration made at stops own stops was
// taken.
func (a *Agent) registered(stops int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopsRegistered = stops
}

// registerRetry spaces the tries to register; jitter keeps the nodes of a
// cluster from all hitting a restarted coordinator at once.
var registerRetry = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// heartbeatLoop heartbeats every interval until ctx ends or the
// coordinator forgets the node.
func (a *Agent) heartbeatLoop(ctx context.Context, id string, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		hb := api.Heartbeat{Tasks: a.reports()}
		hb.CPUShare, hb.CPUShareMode = a.throttle.state()
		sent := time.Now()
		resp, err := a.heartbeat(ctx, id, hb)
		switch {
		case errors.Is(err, errGone):
			a.obs.registered("")
			return err
		case err != nil && ctx.Err() == nil:
			a.log.Warn("heartbeat", "err", err)
			// Tasks the lease stopped lost their state (a shard's rows, a
			// replica's step): the node must not take them up again from
			// the coordinator's next answer under this registration, as if
			// nothing had happened. It registers anew, naming no previous
			// id, and the coordinator fails their jobs over to a checkpoint.
			if a.checkLease() {
				return fmt.Errorf("%w and stopped its tasks", errFenced)
			}
		case err == nil:
			a.lease.renew(sent)
			a.reconcile(ctx, resp.Tasks)
			if resp.CPUShare != 0 {
				a.applyShare(resp.CPUShare)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// heartbeat sends one heartbeat and waits for its answer no longer than
// the lease: an answer later than that could not keep it, and a
// coordinator that hangs (stopped, or behind a network that drops
// packets) must not hold the node past it, unfenced.
func (a *Agent) heartbeat(ctx context.Context, id string, hb api.Heartbeat) (api.HeartbeatResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Lease)
	defer cancel()
	return a.ctl.heartbeat(ctx, id, hb)
}

// shutdown cancels every task, waits for them and tells the coordinator
// (if registered) which were abandoned.
func (a *Agent) shutdown(id string) {
	a.obs.registered("")
	a.stopTasks("")
	a.wg.Wait()
	if id != "" {
		reports := a.reports()
		for i := range reports {
			if reports[i].State == api.TaskRunning {
				reports[i].State = api.TaskFailed
				reports[i].Error = fmt.Sprintf("node %s shut down at step %d", a.cfg.Name, reports[i].Step)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := a.ctl.heartbeat(ctx, id, api.Heartbeat{Tasks: reports, Leaving: true}); err != nil {
			a.log.Warn("last heartbeat", "err", err)
		}
		cancel()
	}
	a.http.CloseIdleConnections()
}

// sleep waits for d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool { return retry.Sleep(ctx, d) == nil }
