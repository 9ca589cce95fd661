// Package loopback starts a heterps cluster of real processes on loopback
// for the benchmarks: a coordinator and node daemons of one CPU type built
// from this tree, with their files and logs in a directory, and the calls a
// benchmark makes on the coordinator's API.
package loopback

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/tether"
)

// Timing of the cluster every scenario starts.
const (
	Heartbeat    = time.Second     // the coordinator's --heartbeat; a node is dead after three missed
	Lease        = 3 * time.Second // every node file's lease, unless Options say otherwise
	startTimeout = 30 * time.Second
	stopGrace    = 3 * time.Second // SIGTERM, then SIGKILL
)

// Proc is one daemon process; exited is closed once it has exited.
type Proc struct {
	Name   string
	args   []string
	Log    string // its standard error
	cmd    *exec.Cmd
	logf   *os.File
	exited chan struct{}
	stdout sync.WaitGroup // the reader of its standard output
}

// Cluster is a coordinator and node daemons, each its own process, on
// loopback, with their files and logs in dir.
type Cluster struct {
	bin       string // heterpsd
	dir       string
	heartbeat time.Duration
	addr      string // the coordinator's fixed host:port
	URL       string
	Coord     *Proc
	Nodes     []*Proc // in the order of their names n0, n1, ...
	// old are the processes replaced by a restart; close waits for them too.
	old       []*Proc
	client    *http.Client
	coordArgs []string
}

// freeAddr returns a loopback address with a port that was free a moment
// ago: the coordinator must get the same address when it restarts.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// Options say what Start runs: Bin (heterpsd) in Dir, a coordinator with
// Catalog (the TOML, written to Dir/catalog.toml) and the heartbeat
// interval Heartbeat (0: the constant Heartbeat), and one node daemon of
// one unit of Type per entry of Shares, each with that CPU share (1: no
// throttle). Units, when > 0, is every node's units (default 1), and
// Lease every node's lease (default the constant Lease); CoordArgs are
// more coordinator flags (a repeated flag overrides).
type Options struct {
	Bin, Dir, Type string
	Catalog        []byte
	Shares         []float64
	Heartbeat      time.Duration
	Units          int
	Lease          time.Duration
	CoordArgs      []string
}

func (o Options) heartbeat() time.Duration {
	if o.Heartbeat > 0 {
		return o.Heartbeat
	}
	return Heartbeat
}

// Start starts the cluster Options say and waits until every node is
// alive.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if err := os.WriteFile(filepath.Join(o.Dir, "catalog.toml"), o.Catalog, 0o600); err != nil {
		return nil, fmt.Errorf("write the catalog: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: o.Bin, dir: o.Dir, heartbeat: o.heartbeat(), addr: addr, URL: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second},
		coordArgs: o.CoordArgs}
	if err := c.StartCoordinator(ctx); err != nil {
		c.Close()
		return nil, err
	}
	for i, share := range o.Shares {
		name := fmt.Sprintf("n%d", i)
		path := filepath.Join(o.Dir, name+".toml")
		if err := os.WriteFile(path, nodeFile(name, c.URL, o.Type, max(1, o.Units), cmp.Or(o.Lease, Lease), share), 0o600); err != nil {
			c.Close()
			return nil, err
		}
		p, err := c.start(ctx, name, "--role=node", "--config", path)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, p)
	}
	if err := c.WaitAlive(ctx, len(o.Shares)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// nodeFile is the node file of node name: units units of typ on one
// thread each at cpu share, plain loopback links, ports picked by the
// node, and lease.
func nodeFile(name, coordinator, typ string, units int, lease time.Duration, share float64) []byte {
	return fmt.Appendf(nil, "version = 1\nname = %q\ncoordinator = %q\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = %q\nunits = %d\nthreads = 1\nplain = true\nlease = %q\ncpu_share = %g\n",
		name, coordinator, typ, units, lease.String(), share)
}

// StartCoordinator starts (or restarts) the coordinator on the same
// address with the same flags and state directory every time.
func (c *Cluster) StartCoordinator(ctx context.Context) error {
	name := "coordinator"
	if c.Coord != nil {
		name = fmt.Sprintf("coordinator-%d", len(c.old)+1)
	}
	p, err := c.start(ctx, name, append(c.coordinatorArgs(), c.coordArgs...)...)
	if err != nil {
		return err
	}
	if c.Coord != nil {
		c.old = append(c.old, c.Coord)
	}
	c.Coord = p
	return nil
}

// coordinatorArgs are heterpsd's arguments for the cluster's coordinator.
func (c *Cluster) coordinatorArgs() []string {
	return []string{"--role=coordinator", "--catalog", filepath.Join(c.dir, "catalog.toml"),
		"--listen", c.addr, "--state-dir", filepath.Join(c.dir, "state"), "--heartbeat", c.heartbeat.String()}
}

// start runs heterpsd with args, its standard error into dir/name.log, and
// waits for the line it prints once serving.
func (c *Cluster) start(ctx context.Context, name string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, args: args, Log: filepath.Join(c.dir, name+".log"), exited: make(chan struct{})}
	var err error
	if p.logf, err = os.Create(p.Log); err != nil {
		return nil, err
	}
	p.cmd = exec.Command(c.bin, args...)
	p.cmd.Stderr = p.logf
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		p.logf.Close()
		return nil, err
	}
	if err := tether.Start(p.cmd); err != nil { // the daemon ends if this program dies without cleaning up
		p.logf.Close()
		return nil, fmt.Errorf("start %s %s: %w", c.bin, strings.Join(args, " "), err)
	}
	lines := make(chan string, 1)
	p.stdout.Go(func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, out)
	})
	go func() { // owned by the process: ends when it exits, which close ensures
		p.stdout.Wait() // Wait closes the pipe: read it to the end first
		p.cmd.Wait()
		close(p.exited)
	}()
	select {
	case _, ok := <-lines:
		if !ok {
			p.Kill()
			return nil, fmt.Errorf("%s exited before serving; see %s", name, p.Log)
		}
		return p, nil
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	case <-time.After(startTimeout):
		p.Kill()
		return nil, fmt.Errorf("%s printed nothing in %v; see %s", name, startTimeout, p.Log)
	}
}

// Kill sends SIGKILL (after SIGCONT, in case it is stopped) and waits for
// the exit.
func (p *Proc) Kill() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.exited
	p.logf.Close()
}

// Stop sends SIGTERM and waits stopGrace for the exit, then kills.
func (p *Proc) Stop() {
	select {
	case <-p.exited:
		p.logf.Close()
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		p.logf.Close()
	case <-time.After(stopGrace):
		p.Kill()
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s (pid %d): %v: %w", p.Name, p.cmd.Process.Pid, sig, err)
	}
	return nil
}

// Close stops every daemon: the nodes first, then the coordinator.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, p := range c.Nodes {
		wg.Go(p.Stop)
	}
	wg.Wait()
	for _, p := range append(c.old, c.Coord) {
		if p != nil {
			p.Stop()
		}
	}
}

// Node returns the node daemon named name.
func (c *Cluster) Node(name string) (*Proc, error) {
	for _, p := range c.Nodes {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no node daemon named %q", name)
}

// WaitAlive waits until n nodes are alive.
func (c *Cluster) WaitAlive(ctx context.Context, n int) error {
	deadline := time.Now().Add(startTimeout)
	for {
		var nodes []api.NodeStatus
		err := c.Call(ctx, http.MethodGet, "/v1/nodes", "", "", &nodes)
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
		case time.Now().After(deadline):
			return fmt.Errorf("%d of %d nodes alive after %v (last error: %v)", alive, n, startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Submit submits a job file and returns the job's id.
func (c *Cluster) Submit(ctx context.Context, job []byte) (string, error) {
	var r api.SubmitResponse
	if err := c.Call(ctx, http.MethodPost, "/v1/jobs", api.ContentTypeTOML, string(job), &r); err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	return r.JobID, nil
}

// Job returns a job's status.
func (c *Cluster) Job(ctx context.Context, id string) (api.JobStatus, error) {
	var s api.JobStatus
	err := c.Call(ctx, http.MethodGet, "/v1/jobs/"+id, "", "", &s)
	return s, err
}

// RestoredStep is the step a job started from: its checkpoint's, else 0.
func RestoredStep(s api.JobStatus) int64 {
	if s.RestoredFrom == nil {
		return 0
	}
	return s.RestoredFrom.Step
}

// Call sends a request to the coordinator and decodes its JSON reply.
func (c *Cluster) Call(ctx context.Context, method, path, contentType, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, api.MaxBodyBytes))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(raw)))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// Throttle sets the CPU share of the live node named name.
func (c *Cluster) Throttle(ctx context.Context, name string, share float64) error {
	body, err := json.Marshal(api.ThrottleRequest{CPUShare: share})
	if err != nil {
		return err
	}
	var n api.NodeStatus
	if err := c.Call(ctx, http.MethodPost, "/v1/nodes/"+name+"/throttle", "application/json", string(body), &n); err != nil {
		return fmt.Errorf("throttle %s to %g: %w", name, share, err)
	}
	return nil
}
