// Package wiretest puts a faulty network under daemon/wire, for tests only.
// Bridge is a loopback TCP proxy whose links can be delayed, blackholed,
// corrupted, refused or cut (after etcd's test bridge); Faulty wraps any
// wire.Transport to drop, delay, blackhole or cut messages per peer.
package wiretest

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Bridge forwards TCP connections from its own loopback address to a
// target. Point a dialer at Addr instead of the target, then inject faults.
// Every fault applies to bytes in both directions from the moment it is set.
type Bridge struct {
	ln     net.Listener
	target string
	closed chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	links     map[*link]struct{}
	delay     time.Duration
	blackhole bool
	reject    bool
	corrupt   int
}

// link is one proxied connection: client is the dialer's end, server the
// target's.
type link struct{ client, server net.Conn }

func (l *link) close() {
	l.client.Close()
	l.server.Close()
}

// NewBridge listens on 127.0.0.1 and forwards to target.
func NewBridge(target string) (*Bridge, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("wiretest: bridge: %w", err)
	}
	b := &Bridge{ln: ln, target: target, closed: make(chan struct{}), links: make(map[*link]struct{})}
	b.wg.Add(1)
	go b.acceptLoop()
	return b, nil
}

// Addr is the address to dial instead of the target.
func (b *Bridge) Addr() string { return b.ln.Addr().String() }

// Delay holds every chunk of bytes for d before forwarding it (0: none).
func (b *Bridge) Delay(d time.Duration) { b.set(func() { b.delay = d }) }

// Blackhole silently discards all bytes: writes succeed, nothing arrives.
func (b *Bridge) Blackhole() { b.set(func() { b.blackhole = true }) }

// Unblackhole forwards bytes again (those discarded stay lost).
func (b *Bridge) Unblackhole() { b.set(func() { b.blackhole = false }) }

// Reject makes the bridge close new connections at once (true) or forward
// them again (false).
func (b *Bridge) Reject(on bool) { b.set(func() { b.reject = on }) }

// Corrupt flips one byte in each of the next n chunks forwarded.
func (b *Bridge) Corrupt(n int) { b.set(func() { b.corrupt = n }) }

// Cut closes every link now open; new ones are accepted unless rejected.
func (b *Bridge) Cut() {
	b.mu.Lock()
	links := make([]*link, 0, len(b.links))
	for l := range b.links {
		links = append(links, l)
	}
	b.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Links is the number of open links.
func (b *Bridge) Links() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.links)
}

// Close stops the bridge, cuts every link and waits for its goroutines.
func (b *Bridge) Close() error {
	select {
	case <-b.closed:
		return nil
	default:
	}
	close(b.closed)
	err := b.ln.Close()
	b.Cut()
	b.wg.Wait()
	return err
}

func (b *Bridge) set(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

func (b *Bridge) acceptLoop() {
	defer b.wg.Done()
	for {
		client, err := b.ln.Accept()
		if err != nil {
			return // closed
		}
		b.mu.Lock()
		reject := b.reject
		b.mu.Unlock()
		if reject {
			client.Close()
			continue
		}
		server, err := net.DialTimeout("tcp", b.target, 2*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		l := &link{client: client, server: server}
		b.mu.Lock()
		b.links[l] = struct{}{}
		b.mu.Unlock()
		select {
		case <-b.closed: // Close may have cut before this link was listed
			l.close()
		default:
		}
		b.wg.Add(2)
		go b.pipe(l, client, server)
		go b.pipe(l, server, client)
	}
}

// pipe copies src to dst through the bridge's faults until either end fails,
// then closes the whole link.
func (b *Bridge) pipe(l *link, src, dst net.Conn) {
	defer b.wg.Done()
	defer func() {
		l.close()
		b.mu.Lock()
		delete(b.links, l)
		b.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.forward(dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward applies the faults to one chunk and writes what is left of it.
func (b *Bridge) forward(dst net.Conn, chunk []byte) bool {
	b.mu.Lock()
	delay, blackhole := b.delay, b.blackhole
	corrupt := b.corrupt > 0
	if corrupt {
		b.corrupt--
	}
	b.mu.Unlock()
	if blackhole {
		return true
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-b.closed:
			t.Stop()
			return false
		}
	}
	if corrupt {
		chunk[len(chunk)/2] ^= 0xff
	}
	_, err := dst.Write(chunk)
	return err == nil
}
