package wire

import (
	"net"
	"sync"
	"time"
)

// Bounds on the handshakes a Listener runs at once: in all, and from one
// remote host (an IPv4 address or an IPv6 /64, which one machine commonly
// holds whole). Past them the oldest pending connection older than
// evictAfter makes room; when none is that old (a burst: a node dials a
// PS node's 16 lanes per shard at once), the newcomer is admitted anyway,
// up to hardMaxPending, past which it is closed.
const (
	maxPendingHandshakes = 256
	maxHandshakesPerHost = 64
	hardMaxPending       = 4096
	evictAfter           = 500 * time.Millisecond
)

// pendingHandshakes tracks the connections a Listener has accepted but not
// yet authenticated, oldest first. When a new connection would exceed
// either bound, the oldest pending connection (of the new one's host, or of
// all) is closed to make room, if it has been pending for evictAfter: a
// legitimate peer's hello comes within milliseconds of its connecting, so
// a younger one may be a peer's burst of connections and is left alone.
//
// Why the oldest: a legitimate peer sends its hello as soon as it has
// connected and finishes the handshake within a few round trips, so a
// connection still pending after that is almost surely idle or stalling.
// Refusing newcomers instead would let a crowd of silent sockets (fewer
// than the hello timeout's worth, reopened as they are dropped) keep every
// real peer out; with eviction an attacker must open more connections than
// the bound within one legitimate handshake's few milliseconds to disturb
// it, and the per-host bound keeps a single host from doing even that to
// peers on other hosts. Evicted handshakes end at once (their socket is
// closed), so at most maxPendingHandshakes handshakes hold a socket.
type pendingHandshakes struct {
	mu      sync.Mutex
	conns   []*pendingConn // in order of arrival
	perHost map[string]int
}

type pendingConn struct {
	nc      net.Conn
	host    string
	since   time.Time
	evicted bool // guarded by pendingHandshakes.mu
}

func newPendingHandshakes() *pendingHandshakes {
	return &pendingHandshakes{perHost: make(map[string]int)}
}

// admit records nc as pending and returns the connections it displaced,
// already removed, for the caller to close; pc is nil when nc itself is
// refused (hardMaxPending), for the caller to close too.
func (p *pendingHandshakes) admit(nc net.Conn) (pc *pendingConn, evicted []net.Conn) {
	now := time.Now()
	pc = &pendingConn{nc: nc, host: hostOf(nc.RemoteAddr()), since: now}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.perHost[pc.host] >= maxHandshakesPerHost {
		evicted = p.evictOldest(pc.host, now, evicted)
	}
	if len(p.conns) >= maxPendingHandshakes {
		evicted = p.evictOldest("", now, evicted)
	}
	if len(p.conns) >= hardMaxPending {
		return nil, evicted
	}
	p.conns = append(p.conns, pc)
	p.perHost[pc.host]++
	return pc, evicted
}

// done removes pc once its handshake ended, and says whether it had been
// evicted.
func (p *pendingHandshakes) done(pc *pendingConn) (evicted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc.evicted {
		return true
	}
	for i, c := range p.conns {
		if c == pc {
			p.remove(i)
			break
		}
	}
	return false
}

// evictOldest removes the oldest pending connection from host ("": from
// any host), if it has been pending for evictAfter, and appends it to
// evicted.
func (p *pendingHandshakes) evictOldest(host string, now time.Time, evicted []net.Conn) []net.Conn {
	for i, c := range p.conns {
		if now.Sub(c.since) < evictAfter {
			return evicted // the rest are younger still
		}
		if host == "" || c.host == host {
			c.evicted = true
			p.remove(i)
			return append(evicted, c.nc)
		}
	}
	return evicted
}

func (p *pendingHandshakes) remove(i int) {
	c := p.conns[i]
	p.conns = append(p.conns[:i], p.conns[i+1:]...)
	if p.perHost[c.host]--; p.perHost[c.host] == 0 {
		delete(p.perHost, c.host)
	}
}

// len is how many handshakes are pending.
func (p *pendingHandshakes) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// hostOf is the host a remote address counts under: its IPv4 address, or
// its IPv6 /64.
func hostOf(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ip4 := tcp.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return tcp.IP.Mask(net.CIDRMask(64, 128)).String()
}
