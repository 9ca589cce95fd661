package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/pipeline"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// psHost serves the parameter-server shards of every job with shards on
// this node from one listener. A ps.Service serves a fixed set of shards,
// so each job gets its own, and connections are routed to it by the
// client's node id, which names the job (psClientID). A connection that
// arrives before its job's shards are up waits for them.
type psHost struct {
	ln      *wire.Listener
	timeout time.Duration // longest wait for a job's shards
	log     *slog.Logger
	wg      sync.WaitGroup // connection handlers

	mu      sync.Mutex
	jobs    map[string]*psJob
	changed chan struct{} // closed and replaced when jobs changes
}

type psJob struct {
	svc *ps.Service
	ctx context.Context // ends when the job leaves this node
}

func newPSHost(ln *wire.Listener, timeout time.Duration, log *slog.Logger) *psHost {
	return &psHost{ln: ln, timeout: timeout, log: log, jobs: map[string]*psJob{}, changed: make(chan struct{})}
}

// psClientID is the node id a stage's PS client dials with: it names the
// job, which is how psHost routes the connection.
func psClientID(t api.Task) string { return "psc/" + t.JobID + "/" + t.TaskID }

func jobOfClient(id string) string {
	parts := strings.SplitN(id, "/", 3)
	if len(parts) != 3 || parts[0] != "psc" {
		return ""
	}
	return parts[1]
}

// serve accepts connections until ctx ends, each handled on its own
// goroutine; close waits for them.
func (h *psHost) serve(ctx context.Context) {
	for {
		c, err := h.ln.Accept(ctx)
		if err != nil {
			return
		}
		h.wg.Go(func() { h.route(ctx, c) })
	}
}

func (h *psHost) route(ctx context.Context, c *wire.Conn) {
	job := jobOfClient(c.Peer())
	j := h.wait(ctx, job)
	if j == nil {
		h.log.Warn("ps: refused a connection for a job with no shards here", "peer", c.Peer(), "job", job)
		c.Close()
		return
	}
	j.svc.ServeConn(j.ctx, c)
}

// wait returns job's service once it is up, or nil after the timeout.
func (h *psHost) wait(ctx context.Context, job string) *psJob {
	timeout := time.NewTimer(h.timeout)
	defer timeout.Stop()
	for {
		h.mu.Lock()
		j, changed := h.jobs[job], h.changed
		h.mu.Unlock()
		if j != nil || job == "" {
			return j
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		case <-timeout.C:
			return nil
		}
	}
}

func (h *psHost) set(job string, j *psJob) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if j == nil {
		delete(h.jobs, job)
	} else {
		h.jobs[job] = j
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// close stops listening and waits for the connection handlers (which end
// with the contexts of their jobs or of serve).
func (h *psHost) close() {
	h.ln.Close()
	h.wg.Wait()
}

// runPS hosts the shards of one job's PS tasks on this node until ctx
// ends (the job left the node).
func (a *Agent) runPS(ctx context.Context, tasks []*task) {
	spec := tasks[0].spec
	svc, err := buildShards(spec, tasks, a.log)
	if err != nil {
		for _, t := range tasks {
			a.fail(ctx, t, err)
		}
		return
	}
	if spec.CheckpointEvery > 0 {
		// Consistent checkpoints need every shard fenced at one step,
		// across nodes: not wired up yet.
		a.log.Warn("ps: this node does not write the job's checkpoints yet", "job", spec.JobID, "dir", spec.CheckpointDir)
	}
	a.ps.set(spec.JobID, &psJob{svc: svc, ctx: ctx})
	a.log.Info("ps shards up", "job", spec.JobID, "shards", len(tasks))
	<-ctx.Done()
	a.ps.set(spec.JobID, nil)
}

// buildShards declares the job's parameters from its model and stage
// layout (pipeline.PSParams) and makes this node's shards of them.
func buildShards(spec api.Task, tasks []*task, log *slog.Logger) (*ps.Service, error) {
	fail := func(err error) (*ps.Service, error) {
		return nil, fmt.Errorf("ps shards of job %s: %w", spec.JobID, err)
	}
	backend := native.MustCPU()
	cfg, err := config.ParseModel("job "+spec.JobID+" model", []byte(spec.Model))
	if err != nil {
		return fail(err)
	}
	m, err := nn.Build(backend, cfg, spec.Seed)
	if err != nil {
		return fail(err)
	}
	ranges, replicas := layout(spec)
	tables, blocks, err := pipeline.PSParams(m, ranges, spec.Steps)
	if err != nil {
		return fail(err)
	}
	all := pipeline.ShardConfigs(pipeline.ShardSpec{Job: spec.JobID, Model: cfg.Name, Shards: len(spec.PS),
		Mode: psMode(spec.Mode), Replicas: replicas, Backend: backend}, tables, blocks)
	var shards []*ps.Shard
	for _, t := range tasks {
		s, err := ps.NewShard(all[t.spec.Shard])
		if err != nil {
			return fail(err)
		}
		shards = append(shards, s)
	}
	svc, err := ps.NewService(ps.ServiceOptions{Logger: log}, shards...)
	if err != nil {
		return fail(err)
	}
	return svc, nil
}

// layout returns the stages' layer ranges and replica counts.
func layout(t api.Task) ([]pipeline.Range, []int) {
	ranges := make([]pipeline.Range, len(t.Layout))
	replicas := make([]int, len(t.Layout))
	for i, s := range t.Layout {
		ranges[i] = pipeline.Range{First: s.FirstLayer, Last: s.LastLayer}
		replicas[i] = s.Replicas
	}
	return ranges, replicas
}

func psMode(mode string) ps.Mode {
	if mode == api.ModeASP {
		return ps.ASP
	}
	return ps.BSP
}
