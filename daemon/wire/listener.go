package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/heterps/heterps/daemon/retry"
)

// Dial connects to addr and runs the handshake as the dialer. With wantPeer
// set, a listener with another node id is refused. In plain mode addr must be
// a loopback address.
func Dial(ctx context.Context, addr string, cfg Config, wantPeer string) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Plain {
		if err := checkLoopbackHost(addr); err != nil {
			return nil, err
		}
	}
	c, err := dialOnce(ctx, addr, &cfg, wantPeer)
	if errors.Is(err, errHelloRefused) && !cfg.noFeatures {
		// A listener of a version before the hello's features hangs up on
		// one that sets any: ask it again without.
		cfg.noFeatures = true
		return dialOnce(ctx, addr, &cfg, wantPeer)
	}
	return c, err
}

// dialOnce connects to addr, on its twin when it has one, and runs the
// handshake as the dialer.
func dialOnce(ctx context.Context, addr string, cfg *Config, wantPeer string) (*Conn, error) {
	if nc := dialTwin(ctx, addr, cfg); nc != nil {
		return dialOn(ctx, nc, addr, cfg, wantPeer)
	}
	d := net.Dialer{Timeout: cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("wire: dial %s: %w", addr, err)
	}
	return dialOn(ctx, nc, addr, cfg, wantPeer)
}

// dialOn runs the dialer's side of TLS (if configured) and the handshake
// on nc, connected to addr; it closes nc on failure.
func dialOn(ctx context.Context, nc net.Conn, addr string, cfg *Config, wantPeer string) (*Conn, error) {
	if cfg.TLS != nil {
		tc, err := tlsClient(ctx, nc, cfg, addr)
		if err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	peer, fr, err := handshake(ctx, nc, cfg, roleDialer, wantPeer)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return newConn(nc, fr, peer, *cfg), nil
}

// Listener accepts TCP connections, and same-host ones on its twin Unix
// socket (local.go), and authenticates each in its own goroutine. A peer
// that fails the handshake is disconnected and logged; the others are
// served regardless. A peer must send its hello within
// HelloTimeout; at most maxPendingHandshakes connections (and
// maxHandshakesPerHost from one host) may be pending at once, a newcomer
// past either bound displacing the oldest (see pendingHandshakes), so idle
// sockets can neither hold the listener's goroutines nor starve real peers.
type Listener struct {
	ln      net.Listener
	twin    net.Listener // nil if none
	cfg     Config
	pending *pendingHandshakes
	ready   chan *Conn // authenticated, waiting for Accept
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
}

// Listen listens on addr (host:port; port 0 picks one). In plain mode the
// address must be loopback.
func Listen(addr string, cfg Config) (*Listener, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Plain {
		if err := checkLoopbackHost(addr); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("wire: listen: %w", err)
	}
	if cfg.Plain {
		if err := checkLoopback(ln.Addr()); err != nil {
			ln.Close()
			return nil, err
		}
	}
	twin, err := listenTwin(ln, &cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	l := &Listener{ln: ln, twin: twin, cfg: cfg, pending: newPendingHandshakes(), ready: make(chan *Conn)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	for _, ln := range l.sockets() {
		l.wg.Add(1)
		go l.acceptLoop(ln)
	}
	return l, nil
}

// sockets are the listener's TCP socket and its twin, if any.
func (l *Listener) sockets() []net.Listener {
	if l.twin == nil {
		return []net.Listener{l.ln}
	}
	return []net.Listener{l.ln, l.twin}
}

// Addr is the TCP address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Accept returns the next authenticated connection.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.ctx.Done():
		return nil, fmt.Errorf("wire: accept: %w", net.ErrClosed)
	}
}

// Close stops listening, abandons handshakes in progress and waits for the
// listener's goroutines. Connections already accepted stay open.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		for _, ln := range l.sockets() {
			err = errors.Join(err, ln.Close())
		}
		l.wg.Wait()
	})
	return err
}

func (l *Listener) acceptLoop(ln net.Listener) {
	defer l.wg.Done()
	backoff := retry.Policy{Min: 5 * time.Millisecond, Max: time.Second}.Start()
	for {
		nc, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // e.g. out of file descriptors: wait and retry
			l.cfg.Logger.Error("wire: accept", "addr", ln.Addr().String(), "err", err)
			if !backoff.Wait(l.ctx) {
				return
			}
			continue
		}
		backoff.Reset()
		pc, evicted := l.pending.admit(nc)
		for _, old := range evicted {
			old.Close()
		}
		if pc == nil {
			l.cfg.Metrics.refused()
			l.cfg.Logger.Warn("wire: too many pending handshakes; refused a connection", "addr", l.ln.Addr().String(), "from", remoteOf(nc))
			nc.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.authenticate(pc)
		}()
	}
}

// authenticate runs the listener's side of the handshake on pc and hands
// the connection to Accept.
func (l *Listener) authenticate(pc *pendingConn) {
	nc := pc.nc
	var peer string
	var fr *framer
	var err error
	if l.cfg.TLS != nil {
		var tc net.Conn
		if tc, err = tlsServer(l.ctx, nc, &l.cfg); err == nil {
			nc = tc
		}
	}
	if err == nil {
		peer, fr, err = handshake(l.ctx, nc, &l.cfg, roleListener, "")
	}
	evicted := l.pending.done(pc)
	if evicted && err == nil {
		err = errors.New("wire: handshake: dropped to make room for newer ones") // its socket is being closed
	}
	if err != nil {
		nc.Close()
		l.cfg.Metrics.rejected(l.ctx, err, evicted)
		switch {
		case l.ctx.Err() != nil:
		case evicted:
			l.cfg.Logger.Debug("wire: dropped a pending handshake to make room for a newer one", "remote", remoteOf(nc))
		default:
			l.cfg.Logger.Warn("wire: rejected peer", "remote", remoteOf(nc), "err", err)
		}
		return
	}
	c := newConn(nc, fr, peer, l.cfg)
	select {
	case l.ready <- c:
	case <-l.ctx.Done():
		c.Close()
	}
}
