package wire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/heterps/heterps/daemon/retry"
)

// Transport moves messages between this node and its peers. TCPTransport is
// the real one; package wiretest wraps any Transport with faults for tests.
type Transport interface {
	// AddPeer makes node id a peer reachable at addr (host:port).
	AddPeer(id, addr string) error
	// RemovePeer forgets a peer and closes its connection.
	RemovePeer(id string) error
	// Send sends m to peer to on stream (> 0).
	Send(ctx context.Context, to string, stream uint32, m *Message) error
	// Recv returns the next message from peer from on stream (> 0).
	Recv(ctx context.Context, from string, stream uint32) (*MessageView, error)
	// Close closes every connection and stops the transport; idempotent.
	Close() error
}

// TCPTransport keeps one authenticated TCP connection per peer. Of each pair
// of nodes the one with the smaller node id (byte order) dials, and redials
// with backoff whenever the connection drops; the other waits for it. A
// connection only counts for a peer added with AddPeer; others are refused
// and logged. Messages queued on a connection that drops are lost: callers
// that need them again resend (pushes carry what makes a resend idempotent).
type TCPTransport struct {
	cfg    Config
	ln     *Listener
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	peers  map[string]*peer
	added  chan struct{} // closed (and replaced) when a peer is added
	closed bool
}

type peer struct {
	id, addr string
	conn     *Conn         // the current connection; nil before the first
	changed  chan struct{} // closed (and replaced) when conn changes or the peer goes
	stopDial context.CancelFunc
}

func (p *peer) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

var _ Transport = (*TCPTransport)(nil)

// NewTCPTransport listens on listenAddr and starts serving peers.
func NewTCPTransport(listenAddr string, cfg Config) (*TCPTransport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ln, err := Listen(listenAddr, cfg)
	if err != nil {
		return nil, err
	}
	t := &TCPTransport{cfg: cfg, ln: ln, peers: make(map[string]*peer), added: make(chan struct{})}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.wg.Add(1)
	go t.serve()
	return t, nil
}

// Addr is the address peers dial to reach this node.
func (t *TCPTransport) Addr() net.Addr { return t.ln.Addr() }

// AddPeer registers peer id. If this node's id is the smaller of the two it
// dials addr now and keeps the connection up; otherwise addr may be empty
// and the peer is expected to dial in.
func (t *TCPTransport) AddPeer(id, addr string) error {
	if err := checkNodeID(id); err != nil {
		return err
	}
	if id == t.cfg.NodeID {
		return fmt.Errorf("wire: add peer %q: that is this node", id)
	}
	dials := t.cfg.NodeID < id
	if dials && addr == "" {
		return fmt.Errorf("wire: add peer %q: this node dials it (smaller id) but has no address", id)
	}
	if dials && t.cfg.Plain {
		if err := checkLoopbackHost(addr); err != nil {
			return err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("wire: add peer %q: %w: transport closed", id, ErrClosed)
	}
	if _, ok := t.peers[id]; ok {
		return fmt.Errorf("wire: add peer %q: already a peer", id)
	}
	p := &peer{id: id, addr: addr, changed: make(chan struct{})}
	if dials {
		ctx, cancel := context.WithCancel(t.ctx)
		p.stopDial = cancel
		t.wg.Add(1)
		go t.dialLoop(ctx, p)
	}
	t.peers[id] = p
	close(t.added)
	t.added = make(chan struct{})
	return nil
}

// RemovePeer forgets peer id and closes its connection.
func (t *TCPTransport) RemovePeer(id string) error {
	t.mu.Lock()
	p, ok := t.peers[id]
	var c *Conn
	if ok {
		delete(t.peers, id)
		p.signal()
		c = p.conn
	}
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("wire: remove peer %q: %w", id, ErrUnknownPeer)
	}
	if p.stopDial != nil {
		p.stopDial()
	}
	if c != nil {
		c.Close()
	}
	return nil
}

// Send sends m to peer to on stream. Before the first connection to the
// peer is up it waits up to DialTimeout; while the connection is down it
// fails at once with the reason.
func (t *TCPTransport) Send(ctx context.Context, to string, stream uint32, m *Message) error {
	c, err := t.PeerConn(ctx, to)
	if err != nil {
		return err
	}
	return c.Send(ctx, stream, m)
}

// Recv returns the next message from peer from on stream, with the same
// connection rules as Send.
func (t *TCPTransport) Recv(ctx context.Context, from string, stream uint32) (*MessageView, error) {
	c, err := t.PeerConn(ctx, from)
	if err != nil {
		return nil, err
	}
	return c.Recv(ctx, stream)
}

// RecvShared is Recv through Conn.RecvShared: the message may lie in the
// peer's shared ring until Release.
func (t *TCPTransport) RecvShared(ctx context.Context, from string, stream uint32) (*MessageView, error) {
	c, err := t.PeerConn(ctx, from)
	if err != nil {
		return nil, err
	}
	return c.RecvShared(ctx, stream)
}

// SharedReceiver is a Transport that can hand over messages lying in a
// same-host peer's shared memory (Conn.RecvShared).
type SharedReceiver interface {
	RecvShared(ctx context.Context, from string, stream uint32) (*MessageView, error)
}

// RecvShared receives from t with RecvShared where t has it, else with
// Recv: for a receiver that releases every message it takes and keeps
// nothing of one after.
func RecvShared(ctx context.Context, t Transport, from string, stream uint32) (*MessageView, error) {
	if s, ok := t.(SharedReceiver); ok {
		return s.RecvShared(ctx, from, stream)
	}
	return t.Recv(ctx, from, stream)
}

// PeerConn returns the connection to peer id, waiting up to DialTimeout for
// a first one. If the current connection has dropped and no new one is up,
// it returns the drop's error.
func (t *TCPTransport) PeerConn(ctx context.Context, id string) (*Conn, error) {
	var timeout <-chan time.Time // started only if we have to wait
	for {
		c, changed, err := t.current(id)
		if err != nil || c != nil {
			return c, err
		}
		if timeout == nil {
			wait := time.NewTimer(t.cfg.DialTimeout)
			defer wait.Stop()
			timeout = wait.C
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("wire: waiting for a connection to %q: %w", id, ctx.Err())
		case <-timeout:
			return nil, fmt.Errorf("wire: no connection to peer %q within %v", id, t.cfg.DialTimeout)
		}
	}
}

// current returns peer id's connection, or nil and a channel that is closed
// when that may have changed.
func (t *TCPTransport) current(id string) (*Conn, <-chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, nil, fmt.Errorf("%w: transport closed", ErrClosed)
	}
	p := t.peers[id]
	if p == nil {
		return nil, nil, fmt.Errorf("%w %q", ErrUnknownPeer, id)
	}
	if p.conn == nil {
		return nil, p.changed, nil
	}
	if err := p.conn.Err(); err != nil {
		return nil, nil, err
	}
	return p.conn, nil, nil
}

// Close closes every connection, stops listening and dialling, and waits for
// the transport's goroutines. It is idempotent.
func (t *TCPTransport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	var conns []*Conn
	for _, p := range t.peers {
		p.signal()
		if p.conn != nil {
			conns = append(conns, p.conn)
		}
	}
	t.mu.Unlock()
	t.cancel()
	err := t.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	t.wg.Wait()
	return err
}

// serve adopts connections that peers dial in. A connection from a node
// that is not a peer yet waits up to DialTimeout for it to be added: nodes
// add each other one after the other, so a peer's dial may come first.
func (t *TCPTransport) serve() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept(t.ctx)
		if err != nil {
			return
		}
		t.mu.Lock()
		p := t.peers[c.Peer()]
		t.mu.Unlock()
		if p == nil {
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				t.adopt(c, t.awaitPeer(c.Peer()))
			}()
			continue
		}
		t.adopt(c, p)
	}
}

// awaitPeer returns peer id once it is added, or nil after DialTimeout or
// when the transport closes.
func (t *TCPTransport) awaitPeer(id string) *peer {
	timeout := time.NewTimer(t.cfg.DialTimeout)
	defer timeout.Stop()
	for {
		t.mu.Lock()
		p, added := t.peers[id], t.added
		t.mu.Unlock()
		if p != nil {
			return p
		}
		select {
		case <-added:
		case <-timeout.C:
			return nil
		case <-t.ctx.Done():
			return nil
		}
	}
}

// adopt makes c, dialled in by a peer, p's connection, unless p is nil
// (not a peer) or this node is the one that dials p.
func (t *TCPTransport) adopt(c *Conn, p *peer) {
	switch {
	case p == nil:
		t.cfg.Logger.Warn("wire: refused connection from a node that is not a peer", "peer", c.Peer(), "remote", remoteOf(c.nc))
		c.Close()
		return
	case p.stopDial != nil:
		t.cfg.Logger.Warn("wire: refused connection from a peer with a larger node id: this node dials it", "peer", c.Peer(), "remote", remoteOf(c.nc))
		c.Close()
		return
	}
	if !t.install(p, c) {
		c.Close()
	}
}

// dialLoop keeps a connection to p up until ctx ends.
func (t *TCPTransport) dialLoop(ctx context.Context, p *peer) {
	defer t.wg.Done()
	backoff := retry.Policy{Min: 20 * time.Millisecond, Max: 2 * time.Second}.Start()
	for {
		c, err := Dial(ctx, p.addr, t.cfg, p.id)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			level := slog.LevelInfo // the peer may not be up yet
			if errors.Is(err, ErrAuth) {
				level = slog.LevelWarn
			}
			t.cfg.Logger.Log(ctx, level, "wire: dial peer", "peer", p.id, "addr", p.addr, "err", err)
			if !backoff.Wait(ctx) {
				return
			}
			continue
		}
		backoff.Reset()
		if !t.install(p, c) {
			c.Close()
			return
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			return
		}
		if !backoff.Wait(ctx) {
			return
		}
	}
}

// install makes c p's connection, closing the one it replaces. It is false
// when p is no longer a peer or the transport has closed.
func (t *TCPTransport) install(p *peer, c *Conn) bool {
	t.mu.Lock()
	if t.closed || t.peers[p.id] != p {
		t.mu.Unlock()
		return false
	}
	old := p.conn
	p.conn = c
	p.signal()
	t.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return true
}
