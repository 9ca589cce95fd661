package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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
)

// Timing of the cluster every scenario starts.
const (
	heartbeat    = time.Second     // the coordinator's --heartbeat; a node is dead after three missed
	lease        = 3 * time.Second // every node file's lease
	startTimeout = 30 * time.Second
	stopGrace    = 3 * time.Second // SIGTERM, then SIGKILL
)

// proc is one daemon process; exited is closed once it has exited.
type proc struct {
	name   string
	args   []string
	log    string
	cmd    *exec.Cmd
	logf   *os.File
	exited chan struct{}
	stdout sync.WaitGroup // the reader of its standard output
}

// cluster is a coordinator and node daemons, each its own process, on
// loopback, with their files and logs in dir.
type cluster struct {
	bin   string // heterpsd
	dir   string
	addr  string // the coordinator's fixed host:port
	url   string
	coord *proc
	nodes []*proc // in the order of their names n0, n1, ...
	// old are the processes replaced by a restart; close waits for them too.
	old    []*proc
	client *http.Client
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

// startCluster starts a coordinator with catalog and a state directory in
// dir, and n node daemons of one unit of typ each, and waits until every
// node is alive.
func startCluster(ctx context.Context, bin, dir, catalog, typ string, n int) (*cluster, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, dir: dir, addr: addr, url: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}}
	if err := c.startCoordinator(ctx); err != nil {
		c.close()
		return nil, err
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		path := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(path, nodeFile(name, c.url, typ), 0o600); err != nil {
			c.close()
			return nil, err
		}
		p, err := c.start(ctx, name, "--role=node", "--config", path)
		if err != nil {
			c.close()
			return nil, err
		}
		c.nodes = append(c.nodes, p)
	}
	if err := c.waitAlive(ctx, n); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// nodeFile is the node file of node name: one unit of typ on one thread,
// plain loopback links, ports picked by the node, and the short lease.
func nodeFile(name, coordinator, typ string) []byte {
	return fmt.Appendf(nil, "version = 1\nname = %q\ncoordinator = %q\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = %q\nunits = 1\nthreads = 1\nplain = true\nlease = %q\n",
		name, coordinator, typ, lease.String())
}

// startCoordinator starts (or restarts) the coordinator on c.addr with the
// same flags and state directory every time.
func (c *cluster) startCoordinator(ctx context.Context) error {
	name := "coordinator"
	if c.coord != nil {
		name = fmt.Sprintf("coordinator-%d", len(c.old)+1)
	}
	p, err := c.start(ctx, name, "--role=coordinator", "--catalog", filepath.Join(c.dir, "catalog.toml"),
		"--listen", c.addr, "--state-dir", filepath.Join(c.dir, "state"), "--heartbeat", heartbeat.String())
	if err != nil {
		return err
	}
	if c.coord != nil {
		c.old = append(c.old, c.coord)
	}
	c.coord = p
	return nil
}

// start runs heterpsd with args, its standard error into dir/name.log, and
// waits for the line it prints once serving.
func (c *cluster) start(ctx context.Context, name string, args ...string) (*proc, error) {
	p := &proc{name: name, args: args, log: filepath.Join(c.dir, name+".log"), exited: make(chan struct{})}
	var err error
	if p.logf, err = os.Create(p.log); err != nil {
		return nil, err
	}
	p.cmd = exec.Command(c.bin, args...)
	p.cmd.Stderr = p.logf
	// The kernel kills the daemon if this program dies without cleaning up.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		p.logf.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
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
			p.kill()
			return nil, fmt.Errorf("%s exited before serving; see %s", name, p.log)
		}
		return p, nil
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	case <-time.After(startTimeout):
		p.kill()
		return nil, fmt.Errorf("%s printed nothing in %v; see %s", name, startTimeout, p.log)
	}
}

// kill sends SIGKILL (after SIGCONT, in case it is stopped) and waits for
// the exit.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.exited
	p.logf.Close()
}

// stop sends SIGTERM and waits stopGrace for the exit, then kills.
func (p *proc) stop() {
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
		p.kill()
	}
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s (pid %d): %v: %w", p.name, p.cmd.Process.Pid, sig, err)
	}
	return nil
}

// close stops every daemon: the nodes first, then the coordinator.
func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, p := range c.nodes {
		wg.Go(p.stop)
	}
	wg.Wait()
	for _, p := range append(c.old, c.coord) {
		if p != nil {
			p.stop()
		}
	}
}

// node returns the node daemon named name.
func (c *cluster) node(name string) (*proc, error) {
	for _, p := range c.nodes {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no node daemon named %q", name)
}

// waitAlive waits until n nodes are alive.
func (c *cluster) waitAlive(ctx context.Context, n int) error {
	deadline := time.Now().Add(startTimeout)
	for {
		var nodes []api.NodeStatus
		err := c.call(ctx, http.MethodGet, "/v1/nodes", "", "", &nodes)
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

// submit submits a job file and returns the job's id.
func (c *cluster) submit(ctx context.Context, job []byte) (string, error) {
	var r api.SubmitResponse
	if err := c.call(ctx, http.MethodPost, "/v1/jobs", api.ContentTypeTOML, string(job), &r); err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	return r.JobID, nil
}

// job returns a job's status.
func (c *cluster) job(ctx context.Context, id string) (api.JobStatus, error) {
	var s api.JobStatus
	err := c.call(ctx, http.MethodGet, "/v1/jobs/"+id, "", "", &s)
	return s, err
}

// call sends a request to the coordinator and decodes its JSON reply.
func (c *cluster) call(ctx context.Context, method, path, contentType, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, strings.NewReader(body))
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

// errTimeout is wrapped by waits that ran past their deadline.
var errTimeout = errors.New("deadline passed")
