package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is an authenticated connection to one peer that carries many logical
// streams. A reader goroutine validates every frame and queues each message
// on its stream (at most QueueDepth messages per stream and QueueBytes of
// payload per connection); senders take turns writing whole frames. Any
// corrupt, truncated or out-of-order frame, a deadline that fires, or a
// stream whose queue stays full for ReadTimeout closes the connection: the
// reason is logged and every waiter gets an error wrapping ErrClosed and the
// reason.
type Conn struct {
	nc   net.Conn
	cfg  Config
	peer string
	log  *slog.Logger

	wlock     chan struct{} // one slot: its holder writes a whole frame
	fr        *framer       // sendSeq guarded by wlock, recvSeq owned by the reader
	lastWrite atomic.Int64  // unix nanoseconds of the last completed write
	closing   atomic.Bool   // Close has begun: read errors are our own doing

	mu      sync.Mutex
	streams map[uint32]chan *MessageView
	// sharedStreams: taken with RecvShared, their messages stay in the
	// peer's ring until released
	sharedStreams map[uint32]bool
	queued        int           // payload bytes in the stream queues, guarded by mu
	freed         chan struct{} // poked when Recv takes a message off a queue

	done      chan struct{}
	closeOnce sync.Once
	unshare   sync.Once // unmaps the shared rings on Close
	reason    error     // why it closed; written once before done is closed
	wg        sync.WaitGroup
}

func newConn(nc net.Conn, fr *framer, peer string, cfg Config) *Conn {
	c := &Conn{
		nc:            nc,
		cfg:           cfg,
		peer:          peer,
		log:           cfg.Logger.With("peer", peer, "remote", remoteOf(nc)),
		wlock:         make(chan struct{}, 1),
		fr:            fr,
		streams:       make(map[uint32]chan *MessageView),
		sharedStreams: make(map[uint32]bool),
		freed:         make(chan struct{}, 1),
		done:          make(chan struct{}),
	}
	// Small frames arrive many to a read; large payloads bypass the buffer.
	fr.r = bufio.NewReaderSize(nc, 32<<10)
	if fr.shared != nil { // for a connection that failed and was dropped unclosed
		runtime.AddCleanup(c, (*sharedMem).close, fr.shared)
	}
	c.lastWrite.Store(time.Now().UnixNano())
	c.wg.Add(2)
	go c.readLoop()
	go c.keepAlive()
	return c
}

// Peer is the node id the peer proved in the handshake.
func (c *Conn) Peer() string { return c.peer }

// LocalAddr is this end's network address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// RemoteAddr is the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Done is closed when the connection has closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is open and afterwards says why it closed.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.closedErr()
	default:
		return nil
	}
}

func (c *Conn) closedErr() error {
	return fmt.Errorf("%w (peer %s): %w", ErrClosed, c.peer, c.reason)
}

// Close says goodbye to the peer if it can do so at once, closes the
// connection and waits for its goroutines. It is idempotent; waiters in Send
// and Recv return an error wrapping ErrClosed.
func (c *Conn) Close() error {
	c.closing.Store(true)
	select {
	case c.wlock <- struct{}{}:
		c.nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.fr.writeSmall(MsgGoAway, nil)
		<-c.wlock
	default: // a write is under way; the peer will see the connection drop
	}
	c.fail(errClosedLocally)
	c.wg.Wait()
	c.unshare.Do(func() {
		if c.fr.shared != nil {
			c.wlock <- struct{}{} // no Send writes the ring any more; held for good
			c.fr.shared.close()
		}
	})
	return nil
}

var errClosedLocally = errors.New("closed by this node")

// fail closes the connection for reason, once, without waiting.
func (c *Conn) fail(reason error) {
	c.closeOnce.Do(func() {
		c.reason = reason
		close(c.done)
		c.nc.Close()
		switch {
		case errors.Is(reason, errClosedLocally), errors.Is(reason, ErrPeerClosed):
			c.log.Debug("wire: connection closed", "reason", reason)
		default:
			c.log.Warn("wire: connection closed", "reason", reason)
		}
	})
}

// Send writes m as one frame on stream (> 0). It waits for its turn to
// write until ctx is done; once the frame has started it is finished or the
// connection fails (WriteTimeout bounds it). m's tensors are not copied.
func (c *Conn) Send(ctx context.Context, stream uint32, m *Message) error {
	if stream == 0 {
		return errors.New("wire: send: stream 0 is reserved for connection control")
	}
	p, err := encodeMessage(m, c.cfg.MaxPayload, !c.fr.unchecked)
	if err != nil {
		return fmt.Errorf("wire: send to %s: %w", c.peer, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case c.wlock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.closedErr()
	}
	defer func() { <-c.wlock }()
	if c.Err() != nil {
		return c.closedErr()
	}
	h := Header{Type: m.Type, Stream: stream, Length: uint32(p.size), CRC: p.crc}
	pieces, err := c.placeShared(&h, p)
	if err != nil {
		c.fail(err)
		return c.closedErr()
	}
	c.fr.sendSeq++
	h.Seq = c.fr.sendSeq
	var hdr [HeaderSize]byte
	PutHeader(hdr[:], h)
	bufs := make(net.Buffers, 0, 1+len(pieces))
	bufs = append(append(bufs, hdr[:]), pieces...)
	if err := c.nc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout)); err != nil {
		c.fail(fmt.Errorf("set write deadline: %w", err))
		return c.closedErr()
	}
	if _, err := bufs.WriteTo(c.nc); err != nil {
		c.fail(fmt.Errorf("write frame on stream %d: %w", stream, err))
		return c.closedErr()
	}
	c.lastWrite.Store(time.Now().UnixNano())
	c.cfg.Metrics.frameSent(HeaderSize + p.size)
	return nil
}

// placeShared puts p in the shared ring when the connection has one and p
// fits there, making h a shared frame, and returns what goes through the
// socket: p's pieces or the shared frame's descriptor. The caller holds
// the write lock.
func (c *Conn) placeShared(h *Header, p encodedPayload) ([][]byte, error) {
	sh := c.fr.shared
	if sh == nil {
		return p.pieces, nil
	}
	pos, ok, err := sh.place(p.size)
	if err != nil || !ok {
		return p.pieces, err
	}
	sh.copyIn(pos, p.pieces)
	c.cfg.Metrics.sharedPayload(p.size)
	desc := sharedDesc(pos, p.size)
	h.Flags, h.Length, h.CRC = flagShared, sharedDescSize, 0
	if !c.fr.unchecked {
		h.CRC = crc32.Checksum(desc, castagnoli)
	}
	return [][]byte{desc}, nil
}

// Recv returns the next message on stream (> 0), waiting until one arrives,
// ctx is done or the connection closes. Messages that arrived before a close
// are still returned.
func (c *Conn) Recv(ctx context.Context, stream uint32) (*MessageView, error) {
	m, err := c.recv(ctx, stream)
	if err != nil || m.ring == nil {
		return m, err
	}
	return m.detach(c.cfg.MaxPayload)
}

// RecvShared is Recv for a receiver that releases every message it takes:
// its tensors may lie in memory the peer writes into (a same-host peer's
// ring, shared.go), read there without a copy, and they stay there (the
// peer's ring space taken) until Release. From its first call on the
// stream, that stream's messages wait in the ring rather than being copied
// out as they arrive.
func (c *Conn) RecvShared(ctx context.Context, stream uint32) (*MessageView, error) {
	c.shareStream(stream)
	return c.recv(ctx, stream)
}

// shareStream leaves stream's messages in the peer's ring from now on.
func (c *Conn) shareStream(stream uint32) {
	if c.fr.shared != nil {
		c.mu.Lock()
		c.sharedStreams[stream] = true
		c.mu.Unlock()
	}
}

func (c *Conn) recv(ctx context.Context, stream uint32) (*MessageView, error) {
	if stream == 0 {
		return nil, errors.New("wire: recv: stream 0 is reserved for connection control")
	}
	q, err := c.queue(stream)
	if err != nil {
		return nil, err
	}
	select {
	case m := <-q:
		return c.taken(m), nil
	default:
	}
	select {
	case m := <-q:
		return c.taken(m), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		select {
		case m := <-q:
			return c.taken(m), nil
		default:
			return nil, c.closedErr()
		}
	}
}

// taken returns m's bytes to the queue budget and wakes the reader if it
// waits for room.
func (c *Conn) taken(m *MessageView) *MessageView {
	c.mu.Lock()
	c.queued -= m.size
	c.mu.Unlock()
	select {
	case c.freed <- struct{}{}:
	default:
	}
	return m
}

// reserve takes n bytes of the queue budget if they fit, or if nothing is
// queued (so that one message of any allowed size gets through).
func (c *Conn) reserve(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queued > 0 && c.queued+n > c.cfg.QueueBytes {
		return false
	}
	c.queued += n
	return true
}

// queue returns stream's receive queue, making it if it is new.
func (c *Conn) queue(stream uint32) (chan *MessageView, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, ok := c.streams[stream]; ok {
		return q, nil
	}
	if len(c.streams) >= c.cfg.MaxStreams {
		return nil, fmt.Errorf("wire: stream %d would exceed the limit of %d streams on the connection to %s", stream, c.cfg.MaxStreams, c.peer)
	}
	q := make(chan *MessageView, c.cfg.QueueDepth)
	c.streams[stream] = q
	return q, nil
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	for {
		m, err := c.readMessage()
		if err == nil && m != nil {
			err = c.deliver(m)
		}
		if err != nil {
			if c.closing.Load() {
				err = errClosedLocally
			}
			c.fail(err)
			return
		}
	}
}

// readMessage reads one frame. Control frames are handled here and give a
// nil message.
func (c *Conn) readMessage() (*MessageView, error) {
	if err := c.nc.SetReadDeadline(time.Now().Add(c.cfg.IdleTimeout)); err != nil {
		return nil, err
	}
	h, err := c.fr.readHeader(c.cfg.MaxPayload)
	if err == io.EOF {
		return nil, errors.New("peer hung up without a goodbye (EOF)")
	}
	if err != nil {
		return nil, err
	}
	if err := c.nc.SetReadDeadline(time.Now().Add(c.cfg.ReadTimeout)); err != nil {
		return nil, err
	}
	if h.Flags&flagShared != 0 {
		return c.readShared(h)
	}
	payload, err := readPayloadInto(c.fr.r, h, getPayload(int(h.Length)), !c.fr.unchecked)
	if err != nil {
		return nil, err
	}
	switch {
	case h.Type == MsgPing && h.Stream == 0 && h.Length == 0:
		return nil, nil
	case h.Type == MsgGoAway && h.Stream == 0 && h.Length == 0:
		return nil, ErrPeerClosed
	case h.Type < MsgData || h.Stream == 0:
		return nil, decodeErr("frame", ErrMalformed, "unexpected %s on stream %d after the handshake", h.Type, h.Stream)
	}
	c.cfg.Metrics.frameReceived(HeaderSize + int(h.Length))
	m, err := DecodeMessage(h.Type, payload, c.cfg.MaxPayload)
	if err != nil {
		return nil, fmt.Errorf("stream %d seq %d: %w", h.Stream, h.Seq, err)
	}
	m.Stream, m.buf = h.Stream, payload
	return m, nil
}

// readShared reads a shared frame's descriptor and takes its message from
// the peer's ring: where it lies for a stream taken with RecvShared, else
// copied out at once.
func (c *Conn) readShared(h Header) (*MessageView, error) {
	desc, err := readPayloadInto(c.fr.r, h, make([]byte, sharedDescSize), !c.fr.unchecked)
	if err != nil {
		return nil, err
	}
	pos, n := binary.LittleEndian.Uint64(desc), binary.LittleEndian.Uint64(desc[8:])
	sh := c.fr.shared
	failed := func(err error) error { return fmt.Errorf("stream %d seq %d: %w", h.Stream, h.Seq, err) }
	region, err := sh.take(pos, n, c.cfg.MaxPayload)
	if err != nil {
		return nil, failed(err)
	}
	c.cfg.Metrics.frameReceived(HeaderSize + int(n))
	c.mu.Lock()
	inPlace := c.sharedStreams[h.Stream]
	c.mu.Unlock()
	if !inPlace {
		m, err := decodeCopy(h.Type, h.Stream, region, c.cfg.MaxPayload)
		sh.release(pos, pos+n)
		if err != nil {
			return nil, failed(err)
		}
		return m, nil
	}
	m, err := DecodeMessage(h.Type, region, c.cfg.MaxPayload)
	if err != nil {
		sh.release(pos, pos+n)
		return nil, failed(err)
	}
	m.Stream = h.Stream
	m.inRing(sh, pos, pos+n)
	return m, nil
}

// deliver queues m on its stream, waiting at most ReadTimeout for room in
// the queue and in the byte budget.
func (c *Conn) deliver(m *MessageView) error {
	q, err := c.queue(m.Stream)
	if err != nil {
		return err
	}
	reserved := c.reserve(m.size)
	if reserved {
		select {
		case q <- m:
			return nil
		default:
		}
	}
	stalled := time.NewTimer(c.cfg.ReadTimeout)
	defer stalled.Stop()
	for {
		if !reserved {
			reserved = c.reserve(m.size)
		}
		var put chan<- *MessageView
		if reserved {
			put = q
		}
		select {
		case put <- m:
			return nil
		case <-c.freed:
		case <-c.done:
			return c.reason
		case <-stalled.C:
			return fmt.Errorf("stream %d: receiver stalled for %v (queue holds %d messages, %d bytes queued on the connection)",
				m.Stream, c.cfg.ReadTimeout, len(q), c.queuedBytes())
		}
	}
}

func (c *Conn) queuedBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued
}

// keepAlive pings when nothing was written for a third of IdleTimeout, so
// that the peer's idle deadline doesn't fire on a quiet connection.
func (c *Conn) keepAlive() {
	defer c.wg.Done()
	every := c.cfg.IdleTimeout / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, c.lastWrite.Load())) < every {
			continue
		}
		select {
		case c.wlock <- struct{}{}:
		default:
			continue // a write is under way: that is activity enough
		}
		err := c.nc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
		if err == nil {
			err = c.fr.writeSmall(MsgPing, nil)
		}
		if err == nil {
			c.lastWrite.Store(time.Now().UnixNano())
		}
		<-c.wlock
		if err != nil {
			c.fail(fmt.Errorf("ping: %w", err))
			return
		}
	}
}
