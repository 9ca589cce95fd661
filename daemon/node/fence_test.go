package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/internal/syncbuf"
)

// TestAFencedNodeDoesNotTakeItsTasksUpAgain: the coordinator stops
// answering (a proxy in front of it stops passing bytes, as a stopped
// process would) for longer than the nodes' lease, and answers again
// before it would declare them dead. The nodes fence their tasks at the
// lease. They must not start the same tasks again from its next answer:
// the shard's rows and the replicas' steps are gone, and the job would
// train on from scratch under its id. They register anew instead, and
// the job, its parameter server lost, stops running under that id.
func TestAFencedNodeDoesNotTakeItsTasksUpAgain(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	rc := startRestartableCoordinatorWith(t, func(c *coord.Config) { c.HeartbeatTimeout = patience })
	t.Cleanup(func() { rc.stop() })
	px := startFreezableProxy(t, rc.addr)
	cl := &cluster{t: t, base: "http://" + rc.addr, client: &http.Client{Transport: &http.Transport{}, Timeout: patience}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait(); cl.client.CloseIdleConnections() })

	const lease = time.Second
	var logs syncbuf.Buffer
	regs := map[string]*prometheus.Registry{}
	for _, name := range []string{"a", "b"} {
		regs[name] = prometheus.NewRegistry()
		a, err := New(Config{Name: name, Coordinator: "http://" + px.addr(), Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0", Type: "cpu",
			Units: 1, Plain: true, Lease: lease, ReadyTimeout: 30 * time.Second, StepTimeout: 30 * time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: regs[name]})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { a.Run(ctx) })
	}
	cl.waitNodes(2)
	id := cl.submit(longDPJob(t, 100000))
	cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 2 || s.State.Final() })
	px.freeze()
	time.Sleep(lease + 1500*time.Millisecond)
	if !strings.Contains(logs.String(), "ran out") {
		t.Fatalf("no node fenced its tasks during the stall:\n%s", logs.String())
	}
	for name, reg := range regs {
		if n := fences(t, reg); n != 1 {
			t.Errorf("node %s: heterps_node_lease_fences_total = %v, want 1", name, n)
		}
	}
	px.thaw()
	s := cl.waitJob(id, func(s api.JobStatus) bool {
		return s.State != api.JobRunning || strings.Count(logs.String(), "task assigned") > 3
	})
	if n := strings.Count(logs.String(), "task assigned"); n > 3 {
		t.Fatalf("the fenced tasks were taken up again (%d assignments for the job's 3 tasks):\n%s", n, logs.String())
	}
	if s.State == api.JobRunning {
		t.Fatalf("job %s still running on tasks whose state is gone", id)
	}
}

// fences reads heterps_node_lease_fences_total from reg.
func fences(t *testing.T, reg prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "heterps_node_lease_fences_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no heterps_node_lease_fences_total")
	return 0
}

// freezableProxy passes TCP connections through to target until frozen;
// frozen, it takes connections and holds every byte until thawed.
type freezableProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	thawed *sync.Cond
	frozen bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startFreezableProxy(t *testing.T, target string) *freezableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezableProxy{ln: ln, target: target}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *freezableProxy) addr() string { return p.ln.Addr().String() }

func (p *freezableProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(out, in) })
		p.wg.Go(func() { p.pipe(in, out) })
	}
}

// pipe copies src to dst, holding what it read while the proxy is frozen.
func (p *freezableProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.frozen {
			p.thawed.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				dst.(*net.TCPConn).CloseWrite()
			}
			return
		}
	}
}

func (p *freezableProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *freezableProxy) thaw() {
	p.mu.Lock()
	p.frozen = false
	p.thawed.Broadcast()
	p.mu.Unlock()
}

func (p *freezableProxy) close() {
	p.thaw()
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
