package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared memory between processes on one host. Over a same-host Unix
// socket (a twin, local.go) each end, once authenticated, hands the other
// a sealed memfd: a ring it writes payloads of 64 KiB and more into. A
// data frame then carries, instead of its payload, the payload's position
// and length in the sender's ring (flagShared); the socket still carries
// every frame in order, so sequence numbers, deadlines, queues and closes
// work as on any connection. What it saves: a payload crosses the kernel
// with two copies (into the socket, out of it); through the ring it is
// copied once by the sender, and read where it lies by a receiver that
// takes it with RecvShared (the allreduce ring, the parameter servers,
// the pipeline's links), or copied out once by one that takes it with
// Recv.
//
// Segment layout: one page of control, whose first 8 bytes hold how far
// the segment's owner has consumed the peer's ring (a position: bytes
// since the connection began, never wrapping), then the ring. A message
// lies whole in the ring: one that would cross its end starts at the next
// lap, and so may one sent when the ring is empty (keeping the pages in
// use few); the receiver refuses any other place. The sender places a
// message only where the peer's consumed position proves the bytes free,
// and sends it inline otherwise (a slow or stopped consumer thus costs the
// ring, never a stall); it never waits on the ring. A receiver releases
// messages in any order and publishes the longest released prefix.
//
// Trust: only an authenticated peer gets a segment, and one it can map
// only for reading where the kernel can seal it so. Its own segment is
// mapped read-only here and must carry F_SEAL_SHRINK, so it cannot be
// truncated under our reads (a SIGBUS); a consumed position that goes
// backwards or past what was written fails the connection. A peer that
// rewrites a payload after sending it changes only float values we read,
// never a length we checked. A killed peer's segment stays mapped until
// the views into it are released.

const (
	// MsgShared (handshake, stream 0) offers the sender's ring: payload the
	// ring's size in bytes (uint64, 0 = none), the memfd attached.
	MsgShared MsgType = 5

	featureShared byte   = 2 // this end can map a peer's ring here
	flagShared    uint16 = 1 // the payload is a position and length in the sender's ring

	sharedControl     = 4096
	sharedDescSize    = 16
	defaultSharedRing = 8 << 20
	// Smaller payloads go through the socket. The ring is faster from 4 KiB
	// in BenchmarkConn (2.8 against 1.8 µs on the Intel VM), but ctrdnn on
	// 4 nodes ran no faster with 4 KiB than with 64 (6 alternated pairs,
	// 0.96-1.05).
	sharedMinPayload = 64 << 10
	maxSharedRing    = 256 << 20
	minSharedRing    = 1 << 20
)

// sharedMem is a connection's pair of rings: its own, which Send writes,
// and the peer's, which the reader takes messages from.
type sharedMem struct {
	own, peer []byte // whole mappings: control page and ring

	// Sending, guarded by the connection's write lock.
	written uint64 // where the next message may start, at the earliest
	seen    uint64 // the peer's consumed position, as last read

	mu       sync.Mutex
	next     uint64            // where the peer's next message starts, at the earliest
	consumed uint64            // published in own's control word
	released map[uint64]uint64 // start -> end of messages released ahead of consumed
	views    int               // messages taken and not yet released
	closed   bool
}

func (s *sharedMem) ownRing() []byte  { return s.own[sharedControl:] }
func (s *sharedMem) peerRing() []byte { return s.peer[sharedControl:] }

// control is the consumed position in a segment's control page.
func control(seg []byte) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&seg[0])) }

// lapStart is where a message of n bytes goes at the earliest position pos
// of a ring of size bytes: pos, or the next lap when it would cross the end.
func lapStart(pos, n, size uint64) uint64 {
	if pos%size+n > size {
		return nextLap(pos, size)
	}
	return pos
}

// nextLap is the first lap boundary at or after pos.
func nextLap(pos, size uint64) uint64 {
	if pos%size == 0 {
		return pos
	}
	return pos + size - pos%size
}

// place reserves n bytes of the own ring and returns where, or ok false
// when they are not free (send inline). An impossible consumed position
// from the peer is an error.
func (s *sharedMem) place(n int) (pos uint64, ok bool, err error) {
	ring := s.ownRing()
	size := uint64(len(ring))
	if n < sharedMinPayload || uint64(n) > size/2 {
		return 0, false, nil
	}
	consumed := control(s.peer).Load()
	if consumed < s.seen || consumed > s.written {
		return 0, false, fmt.Errorf("the peer's shared memory says it consumed %d bytes of ours, but %d were written and %d consumed before", consumed, s.written, s.seen)
	}
	s.seen = consumed
	var start uint64
	if consumed == s.written && s.written%size >= 2*uint64(n) {
		// Empty: begin again at a lap's start, so that the pages in use
		// stay about those the largest burst in flight needs, not the
		// whole ring (a parameter-server lane, one request at a time,
		// would else touch all of its 8 MiB). Not onto the bytes the peer
		// has only just read, though: copying 1 MiB out on one core while
		// the other wrote the next into the same place took 138 µs a
		// message against 101.
		start = nextLap(s.written, size)
	} else {
		start = lapStart(s.written, uint64(n), size)
		if start+uint64(n)-consumed > size {
			return 0, false, nil
		}
	}
	s.written = start + uint64(n)
	return start, true, nil
}

// copyIn writes a message's pieces at pos of the own ring.
func (s *sharedMem) copyIn(pos uint64, pieces [][]byte) {
	ring := s.ownRing()
	off := pos % uint64(len(ring))
	for _, b := range pieces {
		off += uint64(copy(ring[off:], b))
	}
}

// take checks that the peer's message of n bytes lies at pos, where it must
// come next, and returns its bytes in the peer's ring; they stay the
// message's until release(pos, pos+n).
func (s *sharedMem) take(pos, n uint64, maxPayload int) ([]byte, error) {
	ring := s.peerRing()
	size := uint64(len(ring))
	if n == 0 || n > size || n > uint64(maxPayload) {
		return nil, decodeErr("shared frame", ErrMalformed, "payload of %d bytes in a ring of %d (payload limit %d)", n, size, maxPayload)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := lapStart(s.next, n, size)
	if pos != start && pos != nextLap(s.next, size) { // the sender begins a lap again when the ring is empty
		return nil, decodeErr("shared frame", ErrMalformed, "payload at position %d, want %d", pos, start)
	}
	start = pos
	if start > s.next { // the end of the last lap, unused
		s.releaseLocked(s.next, start)
	}
	s.next = start + n
	s.views++
	return s.peerBytes(start, s.next), nil
}

// peerBytes are the bytes of the peer's message at [start, end), which
// lies whole in one lap.
func (s *sharedMem) peerBytes(start, end uint64) []byte {
	ring := s.peerRing()
	off := start % uint64(len(ring))
	return ring[off : off+end-start]
}

// release gives back the peer's message at [start, end) and publishes the
// consumed prefix; the last release after close unmaps.
func (s *sharedMem) release(start, end uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.views--
	s.releaseLocked(start, end)
	s.unmapIfDone()
}

func (s *sharedMem) releaseLocked(start, end uint64) {
	if s.closed {
		return
	}
	s.released[start] = end
	for {
		e, ok := s.released[s.consumed]
		if !ok {
			break
		}
		delete(s.released, s.consumed)
		s.consumed = e
	}
	control(s.own).Store(s.consumed)
}

// close unmaps both segments once no message holds the peer's; the
// caller guarantees that no Send writes the own ring any more.
func (s *sharedMem) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.unmapIfDone()
}

func (s *sharedMem) unmapIfDone() {
	if !s.closed || s.views > 0 || s.own == nil {
		return
	}
	unix.Munmap(s.own)
	unix.Munmap(s.peer)
	s.own, s.peer = nil, nil
}

// offersShared reports whether this end can share memory on nc: a
// same-host Unix socket it reads and writes itself (not inside TLS).
func offersShared(cfg *Config, nc net.Conn) bool {
	_, unixSocket := nc.(*net.UnixConn)
	return unixSocket && !cfg.NoSharedMemory && runtime.GOOS == "linux"
}

// newSegment makes a sealed memfd of a control page and a ring of ring
// bytes, mapped for writing.
func newSegment(ring int) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate("heterps-wire", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(what string, err error) (int, []byte, error) {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(sharedControl+ring)); err != nil {
		return fail("ftruncate", err)
	}
	mem, err = unix.Mmap(fd, 0, sharedControl+ring, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	if err := sealSegment(fd); err != nil {
		unix.Munmap(mem)
		return fail("seal", err)
	}
	return fd, mem, nil
}

// sealSegment fixes a segment's size and, where the kernel can (Linux
// 5.1 and later), keeps any mapping made after ours read-only: the peer
// can read our ring but not write into it.
func sealSegment(fd int) error {
	const fixed = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	_, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, fixed|unix.F_SEAL_FUTURE_WRITE)
	if errors.Is(err, unix.EINVAL) {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, fixed)
	}
	return err
}

// mapPeerSegment maps a peer's segment read-only after checking that it is
// what the peer announced and cannot shrink.
func mapPeerSegment(fd int, ring uint64) ([]byte, error) {
	if ring < minSharedRing || ring > maxSharedRing {
		return nil, fmt.Errorf("ring of %d bytes, want %d..%d", ring, minSharedRing, maxSharedRing)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if uint64(st.Size) != sharedControl+ring {
		return nil, fmt.Errorf("segment of %d bytes, announced %d", st.Size, sharedControl+ring)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("segment not sealed against shrinking (seals %#x, %v)", seals, err)
	}
	mem, err := unix.Mmap(fd, 0, int(sharedControl+ring), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return mem, nil
}

// exchangeShared runs the handshake's last step where both ends offered
// shared memory: each sends its ring (or none, if it could not make one)
// and maps the peer's. Memory is shared only when both sent one.
func (f *framer) exchangeShared(cfg *Config) (*sharedMem, error) {
	uc := f.nc.(*net.UnixConn)
	ring := cfg.SharedRing
	if ring == 0 {
		ring = defaultSharedRing
	}
	fd, own, err := newSegment(ring)
	if err != nil {
		cfg.Logger.Warn("wire: no shared memory with a same-host peer", "err", err)
		own = nil
	}
	if err := f.sendSegment(uc, fd, len(own)); err != nil {
		unmapAll(own)
		return nil, err
	}
	peer, err := f.receiveSegment(uc)
	if err != nil || own == nil || peer == nil {
		unmapAll(own, peer)
		return nil, err
	}
	return &sharedMem{own: own, peer: peer, released: make(map[uint64]uint64)}, nil
}

// closeShared unmaps the rings of a handshake that failed after sharing.
func (f *framer) closeShared() {
	if f.shared != nil {
		f.shared.close()
		f.shared = nil
	}
}

func unmapAll(segs ...[]byte) {
	for _, s := range segs {
		if s != nil {
			unix.Munmap(s)
		}
	}
}

// sendSegment sends MsgShared with fd attached (none when mem is 0 bytes)
// and closes fd: the peer holds its own copy.
func (f *framer) sendSegment(uc *net.UnixConn, fd, mem int) error {
	ring := uint64(0)
	if mem > 0 {
		ring = uint64(mem - sharedControl)
		defer unix.Close(fd)
	}
	f.sendSeq++
	frame := AppendFrame(nil, Header{Type: MsgShared, Seq: f.sendSeq}, binary.LittleEndian.AppendUint64(nil, ring))
	var oob []byte
	if ring > 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := uc.WriteMsgUnix(frame, oob, nil); err != nil {
		return fmt.Errorf("write %s: %w", MsgShared, err)
	}
	return nil
}

// receiveSegment reads the peer's MsgShared and maps the segment it
// carries; nil when the peer sent none.
func (f *framer) receiveSegment(uc *net.UnixConn) ([]byte, error) {
	buf := make([]byte, HeaderSize+8)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	fds := parseRights(oob[:oobn])
	defer closeAll(fds)
	if err == nil && n < len(buf) {
		_, err = io.ReadFull(uc, buf[n:])
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", MsgShared, err)
	}
	h, err := ParseHeader(buf, 8)
	switch {
	case err != nil:
		return nil, err
	case h.Type != MsgShared || h.Stream != 0 || h.Length != 8 || h.Seq != f.recvSeq+1:
		return nil, decodeErr("handshake", ErrMalformed, "got %s on stream %d (seq %d, %d bytes), want %s", h.Type, h.Stream, h.Seq, h.Length, MsgShared)
	}
	f.recvSeq = h.Seq
	if _, err := readPayloadInto(bytes.NewReader(buf[HeaderSize:]), h, make([]byte, 8), true); err != nil {
		return nil, err
	}
	ring := binary.LittleEndian.Uint64(buf[HeaderSize:])
	switch {
	case ring == 0 && len(fds) == 0:
		return nil, nil
	case flags&unix.MSG_CTRUNC != 0 || len(fds) != 1:
		return nil, decodeErr("handshake", ErrMalformed, "%s carries %d descriptors (truncated: %v), want 1", MsgShared, len(fds), flags&unix.MSG_CTRUNC != 0)
	}
	mem, err := mapPeerSegment(fds[0], ring)
	if err != nil {
		return nil, decodeErr("handshake", ErrMalformed, "peer's shared memory: %v", err)
	}
	return mem, nil
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// sharedDesc encodes a shared frame's payload: position and length.
func sharedDesc(pos uint64, n int) []byte {
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, sharedDescSize), pos)
	return binary.LittleEndian.AppendUint64(b, uint64(n))
}
