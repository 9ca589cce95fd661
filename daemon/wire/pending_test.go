package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// openIdle opens n TCP connections to addr from local IP from (nil: any)
// that never send a byte; they are closed when the test ends.
func openIdle(t *testing.T, addr string, n int, from net.IP) []net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != nil {
		d.LocalAddr = &net.TCPAddr{IP: from}
	}
	conns := make([]net.Conn, 0, n)
	for i := range n {
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			if from != nil && i == 0 {
				t.Skipf("cannot dial from %v: %v", from, err)
			}
			t.Fatalf("idle connection %d: %v", i, err)
		}
		t.Cleanup(func() { nc.Close() })
		conns = append(conns, nc)
	}
	return conns
}

// closedBy fails unless the server closes nc before deadline.
func closedBy(t *testing.T, nc net.Conn, deadline time.Time, what string) {
	t.Helper()
	nc.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s is still open", what)
	}
}

// waitPending waits (at most 10s) until ln has n handshakes pending.
func waitPending(t *testing.T, ln *Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ln.pending.len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d handshakes pending, want %d", ln.pending.len(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdleConnectionsDoNotStarveHandshakes: 200 idle connections from
// loopback (the same host as the real peer) neither keep a real peer from
// authenticating, well before the hello timeout, nor outlive the hello
// timeout themselves.
func TestIdleConnectionsDoNotStarveHandshakes(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := testConfig("server", logs)
	cfg.HandshakeTimeout = 30 * time.Second
	cfg.HelloTimeout = 3 * time.Second
	srv := startEcho(t, cfg)
	opened := time.Now()
	idle := openIdle(t, srv.addr(), 200, nil)

	// Without eviction the peer would wait for the idle ones' hello
	// timeouts, 3s per 64 of them.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := Dial(ctx, srv.addr(), testConfig("client", logs), "server")
	if err != nil {
		t.Fatalf("a real peer behind 200 idle connections: %v", err)
	}
	c.Close()

	slack := 2 * time.Second
	for i, nc := range idle {
		closedBy(t, nc, opened.Add(cfg.HelloTimeout+slack), fmt.Sprintf("idle connection %d, %s after the hello timeout,", i, slack))
	}
	logs.waitFor(t, "no hello within the hello timeout")
}

// TestHandshakesPerHostAreBounded: past maxHandshakesPerHost connections
// from one host, the oldest of them, once older than evictAfter, are
// closed at once (long before any timeout); a burst of young ones is not.
func TestHandshakesPerHostAreBounded(t *testing.T) {
	checkLeaks(t)
	cfg := testConfig("server", &logSink{})
	cfg.HandshakeTimeout = time.Minute
	cfg.HelloTimeout = time.Minute
	srv := startEcho(t, cfg)
	const extra = 4
	idle := openIdle(t, srv.addr(), maxHandshakesPerHost, nil)
	waitPending(t, srv.ln, maxHandshakesPerHost)
	time.Sleep(evictAfter + 100*time.Millisecond)
	idle = append(idle, openIdle(t, srv.addr(), extra, nil)...)
	for i, nc := range idle[:extra] {
		closedBy(t, nc, time.Now().Add(10*time.Second), fmt.Sprintf("connection %d of %d from one host", i, len(idle)))
	}
	waitPending(t, srv.ln, maxHandshakesPerHost)
}

// TestPendingHandshakesAreBounded: past maxPendingHandshakes connections
// from many hosts, the oldest are closed at once. It dials from
// 127.0.0.2..., which Linux routes to loopback.
func TestPendingHandshakesAreBounded(t *testing.T) {
	checkLeaks(t)
	cfg := testConfig("server", &logSink{})
	cfg.HandshakeTimeout = time.Minute
	cfg.HelloTimeout = time.Minute
	srv := startEcho(t, cfg)
	hosts := maxPendingHandshakes/maxHandshakesPerHost + 1
	var idle []net.Conn
	for h := range hosts - 1 {
		idle = append(idle, openIdle(t, srv.addr(), maxHandshakesPerHost, net.IPv4(127, 0, 0, byte(2+h)))...)
	}
	waitPending(t, srv.ln, maxPendingHandshakes)
	time.Sleep(evictAfter + 100*time.Millisecond)
	idle = append(idle, openIdle(t, srv.addr(), maxHandshakesPerHost, net.IPv4(127, 0, 0, byte(2+hosts-1)))...)
	for i, nc := range idle[:len(idle)-maxPendingHandshakes] {
		closedBy(t, nc, time.Now().Add(10*time.Second), fmt.Sprintf("connection %d of %d from %d hosts", i, len(idle), hosts))
	}
	waitPending(t, srv.ln, maxPendingHandshakes)
}

func TestHostOf(t *testing.T) {
	for addr, want := range map[string]string{
		"10.1.2.3:7000":                    "10.1.2.3",
		"[::ffff:10.1.2.3]:7000":           "10.1.2.3",
		"[2001:db8:1:2:aaaa:bbbb::1]:7000": "2001:db8:1:2::",
		"[2001:db8:1:2::9]:7001":           "2001:db8:1:2::",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostOf(a); got != want {
			t.Errorf("hostOf(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestABurstOfYoungHandshakesIsAdmitted: a peer that opens more
// connections at once than maxHandshakesPerHost (a node dialling every
// lane of every PS shard) loses none of them: none is older than
// evictAfter.
func TestABurstOfYoungHandshakesIsAdmitted(t *testing.T) {
	checkLeaks(t)
	cfg := testConfig("server", &logSink{})
	cfg.HandshakeTimeout = time.Minute
	cfg.HelloTimeout = time.Minute
	srv := startEcho(t, cfg)
	burst := maxHandshakesPerHost + 20
	openIdle(t, srv.addr(), burst, nil)
	waitPending(t, srv.ln, burst)
}

// A burst younger than evictAfter is admitted past the soft bounds, none
// evicted, up to hardMaxPending; the next connection is refused (pc nil)
// and the pending ones are left as they were. Once the oldest are older
// than evictAfter, a newcomer displaces the oldest instead.
func TestPendingHandshakesRefuseABurstPastTheHardBound(t *testing.T) {
	p := newPendingHandshakes()
	conn := func(i int) net.Conn {
		return addrConn{remote: &net.TCPAddr{IP: net.IPv4(10, 0, byte(i>>8), byte(i)), Port: 4000}}
	}
	for i := range hardMaxPending {
		pc, evicted := p.admit(conn(i))
		if pc == nil || len(evicted) != 0 {
			t.Fatalf("connection %d of a young burst: admitted %v, evicted %d", i, pc != nil, len(evicted))
		}
	}
	pc, evicted := p.admit(conn(hardMaxPending))
	if pc != nil || len(evicted) != 0 || p.len() != hardMaxPending {
		t.Fatalf("past the hard bound: admitted %v, evicted %d, %d pending; want refused, none evicted, %d", pc != nil, len(evicted), p.len(), hardMaxPending)
	}
	p.mu.Lock()
	for _, c := range p.conns {
		c.since = c.since.Add(-2 * evictAfter)
	}
	p.mu.Unlock()
	pc, evicted = p.admit(conn(hardMaxPending + 1))
	if pc == nil || len(evicted) != 1 || evicted[0].RemoteAddr().String() != "10.0.0.0:4000" {
		t.Fatalf("with the burst old: admitted %v, evicted %v; want admitted, the oldest (10.0.0.0) evicted", pc != nil, evicted)
	}
}
