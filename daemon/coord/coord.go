package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/store"
)

// Config configures a coordinator.
type Config struct {
	Catalog *config.Catalog
	// StateDir holds the coordinator's state database (package store):
	// jobs, plans, placements, checkpoints, restart chains and id
	// counters survive a restart of the coordinator. Empty keeps state in
	// memory only (tests, and nothing else).
	StateDir string
	// HeartbeatInterval is how often nodes heartbeat (default 1s);
	// HeartbeatTimeout how long a silent node stays alive (default three
	// intervals).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// AdoptionTimeout is how long, after a restart of the coordinator, the
	// nodes of a running job have to register again and report its tasks
	// before the job counts as failed (default DefaultAdoptionTimeout).
	AdoptionTimeout time.Duration
	// SecretFile is the path the cluster secret was read from (heterpsd
	// --secret-file; ControlSecret holds its key), passed in every task to
	// say that the data plane is authenticated: nodes read their own node
	// file's secret_file. Empty means plain, unauthenticated data-plane
	// connections, which the coordinator only allows when every node of a
	// job has a loopback data address.
	SecretFile string
	// TLS says the cluster runs mutual TLS (heterpsd --tls-*): the data
	// plane is authenticated by certificates even without SecretFile.
	TLS bool
	// QueueLength bounds the jobs waiting to be placed (default 64).
	QueueLength int
	// PlanTimeout bounds one run of the scheduler (default
	// DefaultPlanTimeout).
	PlanTimeout time.Duration
	// KeepFinished is how many final jobs are kept, besides those a live
	// restart chain needs (default DefaultKeepFinished); DeadNodeRetention
	// how long a dead node stays listed (default DefaultDeadNodeRetention).
	KeepFinished      int
	DeadNodeRetention time.Duration
	// RestartBackoff is the wait before a job's first automatic restart,
	// doubled for each further one up to MaxRestartBackoff; SuspectFor
	// how long a restarted job avoids the nodes that failed it.
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	SuspectFor        time.Duration
	// ControlSecret, if set, is the cluster secret: every API request must
	// then be signed with it (api.Sign), and is checked before its body is
	// decoded. Without it the API answers anyone who can reach it.
	ControlSecret []byte
	// FinalCheckpointWait is how long a checkpointing job whose stages
	// have all finished waits for the checkpoint of its last step before
	// it is done without it (default DefaultFinalCheckpointWait).
	FinalCheckpointWait time.Duration
	// FinalCheckpointFailWait is how long such a job waits instead while
	// a PS node reports that it cannot write that checkpoint (a full
	// disk) and keeps trying: time for an operator to free the disk; and
	// how long it waits after a PS node last reported writing that
	// checkpoint further, so that a large one on slow storage is not cut
	// off (default DefaultFinalCheckpointFailWait).
	FinalCheckpointFailWait time.Duration
	// AllocPolicy is the allocation policy of running jobs' units (a
	// policy of package alloc, or "off", the default: jobs keep the
	// units they were placed with); AllocEpoch how often it decides
	// (default DefaultAllocEpoch). See alloc.go.
	AllocPolicy string
	AllocEpoch  time.Duration
	// AskGrid is about how much training separates two steps at which a
	// job with allreduce stages can take a checkpoint asked for while it
	// runs (asked.go; default DefaultAskGrid); the size of its dense
	// parameters may space them further.
	AskGrid time.Duration
	Logger  *slog.Logger
}

// Defaults.
const (
	DefaultHeartbeatInterval       = time.Second
	DefaultQueueLength             = 64
	DefaultFinalCheckpointWait     = 30 * time.Second
	DefaultFinalCheckpointFailWait = 10 * time.Minute
	DefaultAdoptionTimeout         = 30 * time.Second
	DefaultPlanTimeout             = 5 * time.Minute
	DefaultKeepFinished            = 1000
	DefaultDeadNodeRetention       = time.Hour
	DefaultRestartBackoff          = time.Second
	DefaultMaxRestartBackoff       = 2 * time.Minute
	DefaultSuspectFor              = 10 * time.Minute
	DefaultAskGrid                 = 2 * time.Second
	heartbeatsPerTimeout           = 3
)

func (c Config) withDefaults() Config {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = heartbeatsPerTimeout * c.HeartbeatInterval
	}
	setDefault(&c.AdoptionTimeout, DefaultAdoptionTimeout)
	setDefault(&c.PlanTimeout, DefaultPlanTimeout)
	setDefault(&c.DeadNodeRetention, DefaultDeadNodeRetention)
	setDefault(&c.RestartBackoff, DefaultRestartBackoff)
	setDefault(&c.MaxRestartBackoff, DefaultMaxRestartBackoff)
	setDefault(&c.SuspectFor, DefaultSuspectFor)
	setDefault(&c.FinalCheckpointWait, DefaultFinalCheckpointWait)
	setDefault(&c.FinalCheckpointFailWait, DefaultFinalCheckpointFailWait)
	setDefault(&c.AskGrid, DefaultAskGrid)
	if c.QueueLength <= 0 {
		c.QueueLength = DefaultQueueLength
	}
	if c.KeepFinished <= 0 {
		c.KeepFinished = DefaultKeepFinished
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Coordinator is the coordinator's state and its HTTP API.
type Coordinator struct {
	cfg   Config
	log   *slog.Logger
	store *store.Store // nil: state in memory only
	kick  chan struct{}
	// manifests carries checkpoints whose shards are all in to the
	// goroutine that writes their manifests, off the heartbeat path.
	manifests chan manifestWork

	mu       sync.Mutex
	nodes    []*node // in registration order, dead ones included
	jobs     []*job  // in creation order
	lastNode uint64
	lastJob  uint64
	idem     map[string]string // idempotency key -> job id
	drained  map[string]bool   // names of the nodes out of service (drain.go)
	// throttles is the CPU share the latest throttle asked of each node,
	// by name (throttle.go).
	throttles map[string]float64
	// changes counts events that may let a waiting job be placed (a node
	// registered or died, a job ended); the planner retries the head of
	// the queue only when it moved.
	changes uint64
	started time.Time
	// storeFailures is the count of failed state commits seen so far,
	// storeLogged when checkStore last logged them.
	storeFailures int64
	storeLogged   time.Time
	// lastReap is when reap last ran (nodes.go: a longer gap than
	// stalledAfter means the coordinator itself was stopped); stalls
	// counts such gaps.
	lastReap time.Time
	stalls   int64
	serving  atomic.Bool // Serve is serving the API (Ready)
	alloc    allocDecisions

	// profiles are the stored measured profiles by store.ProfileKey
	// (profiles.go), under profMu, which is taken alone or inside c.mu,
	// never around it; profWrite orders the writes of profiles.
	profMu    sync.Mutex
	profiles  map[string]store.Profile
	profWrite sync.Mutex
}

// New makes a coordinator for a validated catalog. With a StateDir it
// opens the state database there and takes up the jobs it holds: running
// jobs wait for their nodes to register again (Config.AdoptionTimeout).
func New(cfg Config) (*Coordinator, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("coord: no catalog")
	}
	if err := cfg.Catalog.Validate(); err != nil {
		return nil, fmt.Errorf("coord: catalog: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := checkAllocConfig(&cfg); err != nil {
		return nil, fmt.Errorf("coord: %w", err)
	}
	c := &Coordinator{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), manifests: make(chan manifestWork, 256),
		idem: map[string]string{}, drained: map[string]bool{}, throttles: map[string]float64{}, started: time.Now(), profiles: map[string]store.Profile{}}
	if cfg.StateDir != "" {
		st, err := store.Open(cfg.StateDir)
		if err != nil {
			return nil, fmt.Errorf("coord: %w", err)
		}
		c.store = st
		if err := c.load(); err != nil {
			st.Close()
			return nil, fmt.Errorf("coord: %w", err)
		}
	}
	return c, nil
}

// Run plans queued jobs, watches node liveness, restarts failed jobs and
// writes checkpoint manifests until ctx ends, then waits for its
// goroutines, closes the state database and returns ctx's error.
func (c *Coordinator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { c.planLoop(ctx) })
	wg.Go(func() { c.reapLoop(ctx) })
	wg.Go(func() { c.restartLoop(ctx) })
	wg.Go(func() { c.manifestLoop(ctx) })
	wg.Go(func() { c.allocLoop(ctx) })
	wg.Wait()
	if c.store != nil {
		if err := c.store.Close(); err != nil {
			c.log.Error("closing the state database", "err", err)
		}
	}
	return ctx.Err()
}

// wake tells the planner that something changed. c.mu is held.
func (c *Coordinator) wake() {
	c.changes++
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Serve runs the coordinator and serves its API on ln until ctx ends; it
// closes ln and returns once every goroutine it started has stopped.
func (c *Coordinator) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           c.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(runCtx) })
	served := make(chan error, 1)
	wg.Go(func() { served <- srv.Serve(ln) })
	c.serving.Store(true)
	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if srv.Shutdown(shutdown) != nil {
			srv.Close()
		}
		cancel()
		err = <-served
	}
	c.serving.Store(false)
	stop()
	wg.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("coord: serve: %w", err)
	}
	return nil
}

// plainDataPlane reports whether jobs' data planes are unauthenticated
// (loopback only): no cluster secret and no mutual TLS.
func (c *Coordinator) plainDataPlane() bool { return c.cfg.SecretFile == "" && !c.cfg.TLS }
