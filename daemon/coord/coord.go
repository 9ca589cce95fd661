package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
)

// Config configures a coordinator.
type Config struct {
	Catalog *config.Catalog
	// HeartbeatInterval is how often nodes heartbeat (default 1s);
	// HeartbeatTimeout how long a silent node stays alive (default three
	// intervals).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// SecretFile is the cluster secret's path on the nodes, passed in every
	// task. Empty means plain, unauthenticated data-plane connections, which
	// the coordinator only allows when every node of a job has a loopback
	// data address.
	SecretFile string
	// QueueLength bounds the jobs waiting to be planned (default 64).
	QueueLength int
	// ControlSecret, if set, is the cluster secret: every API request must
	// then be signed with it (api.Sign), and is checked before its body is
	// decoded. Without it the API answers anyone who can reach it.
	ControlSecret []byte
	// FinalCheckpointWait is how long a checkpointing job whose stages
	// have all finished waits for the checkpoint of its last step before
	// it is done without it (default DefaultFinalCheckpointWait).
	FinalCheckpointWait time.Duration
	Logger              *slog.Logger
}

// Defaults.
const (
	DefaultHeartbeatInterval   = time.Second
	DefaultQueueLength         = 64
	DefaultFinalCheckpointWait = 30 * time.Second
	heartbeatsPerTimeout       = 3
)

func (c Config) withDefaults() Config {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = heartbeatsPerTimeout * c.HeartbeatInterval
	}
	if c.QueueLength <= 0 {
		c.QueueLength = DefaultQueueLength
	}
	if c.FinalCheckpointWait <= 0 {
		c.FinalCheckpointWait = DefaultFinalCheckpointWait
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Coordinator is the coordinator's state and its HTTP API.
type Coordinator struct {
	cfg   Config
	log   *slog.Logger
	queue chan *job // jobs waiting for the planner

	mu       sync.Mutex
	nodes    []*node // in registration order, dead ones included
	jobs     []*job  // in submission order
	lastNode int
	lastJob  int
}

// New makes a coordinator for a validated catalog.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("coord: no catalog")
	}
	if err := cfg.Catalog.Validate(); err != nil {
		return nil, fmt.Errorf("coord: catalog: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Coordinator{cfg: cfg, log: cfg.Logger, queue: make(chan *job, cfg.QueueLength)}, nil
}

// Run plans queued jobs and watches node liveness until ctx ends, then
// waits for its goroutines and returns ctx's error.
func (c *Coordinator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { c.planLoop(ctx) })
	wg.Go(func() { c.reapLoop(ctx) })
	wg.Go(func() { c.restartLoop(ctx) })
	wg.Wait()
	return ctx.Err()
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
	stop()
	wg.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("coord: serve: %w", err)
	}
	return nil
}
