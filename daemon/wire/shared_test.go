package wire

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sharedPair is a dialled connection and the one accepted for it, on a
// listener of cfg (the client's the same but for its id).
func sharedPair(t *testing.T, logs *logSink, cfg Config) (client, server *Conn) {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ccfg := cfg
	ccfg.NodeID = "client"
	client, err = Dial(testContext(t), ln.Addr().String(), ccfg, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	server.shareStream(1) // else stream 1's first messages may arrive before RecvShared asks for them in place
	return client, server
}

// filled is n floats counting up from first.
func filled(n int, first float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = first + float32(i)
	}
	return v
}

func floatMessage(v []float32) *Message {
	return &Message{Type: MsgGradient, Tensors: []Tensor{F32Tensor(v, len(v))}}
}

// wantFloats fails unless m carries exactly want.
func wantFloats(t *testing.T, m *MessageView, want []float32) {
	t.Helper()
	got, err := m.Tensors[0].Float32s(nil)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("received %d floats (%v), want %d starting %v", len(got), err, len(want), want[:1])
	}
}

// relay sends want from client on stream 1 and has server take it in
// place (RecvShared), checking that it arrived intact.
func relay(t *testing.T, client, server *Conn, want []float32) *MessageView {
	t.Helper()
	ctx := testContext(t)
	if err := client.Send(ctx, 1, floatMessage(want)); err != nil {
		t.Fatal(err)
	}
	m, err := server.RecvShared(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantFloats(t, m, want)
	return m
}

// Same-host peers share their rings: large payloads, over several laps of
// the ring, taken in place or copied out, arrive intact both ways; small
// ones stay in the socket.
func TestSharedMemoryCarriesLargePayloads(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ctx := testContext(t)
	c := dialEcho(t, testConfig("server", logs), testConfig("client", logs))
	if c.fr.shared == nil {
		t.Fatal("a same-host connection shares no memory")
	}
	sizes := []int{100, 16 << 10, 25 << 10, 256 << 10, 900 << 10}
	for round := range 12 {
		for i, n := range sizes {
			want := filled(n, float32(round*100+i))
			if err := c.Send(ctx, 1, floatMessage(want)); err != nil {
				t.Fatal(err)
			}
			recv := c.Recv
			if i%2 == 0 {
				recv = c.RecvShared
			}
			m, err := recv(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			wantFloats(t, m, want)
			if inRing := m.ring != nil; inRing != (i%2 == 0 && 4*n >= sharedMinPayload) {
				t.Errorf("%d floats taken with RecvShared %t: in the ring %t", n, i%2 == 0, inRing)
			}
			m.Release()
		}
	}
	sh := c.fr.shared
	if ring := uint64(len(sh.ownRing())); sh.written < 2*ring || sh.next < 2*ring {
		t.Errorf("sent %d and received %d bytes through rings of %d: not two laps", sh.written, sh.next, ring)
	}
}

// A receiver that holds its messages fills the sender's ring; the sender
// then goes on through the socket, and back to the ring once they are
// released.
func TestSharedRingFullSendsInline(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := testConfig("server", logs)
	cfg.SharedRing = minSharedRing
	client, server := sharedPair(t, logs, cfg)
	const n = 240 << 10 / 4 // 240 KiB: four fit the 1 MiB ring, a fifth does not
	var held []*MessageView
	for i := range 6 {
		m := relay(t, client, server, filled(n, float32(i)))
		if inRing := m.ring != nil; inRing != (i < 4) {
			t.Errorf("message %d in the ring: %t, want %t", i, inRing, i < 4)
		}
		held = append(held, m)
	}
	for _, m := range held {
		m.Release()
	}
	m := relay(t, client, server, filled(n, 7))
	defer m.Release()
	if m.ring == nil {
		t.Error("after the releases the sender still sends inline")
	}
}

// A message that would cross the ring's end starts the next lap while
// others are held; one sent when all are released starts a lap again once
// the ring's position is two of its size past the lap's start, so that
// messages sent one at a time keep to the ring's first pages.
func TestSharedRingLaps(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	client, server := sharedPair(t, logs, testConfig("server", logs))
	ring := uint64(len(client.fr.shared.ownRing()))
	send := func(floats int, first float32) *MessageView {
		t.Helper()
		m := relay(t, client, server, filled(floats, first))
		if m.ring == nil {
			t.Fatalf("a message of %d floats sent inline", floats)
		}
		return m
	}
	// 3 MiB each, each held until the next is in: the third crosses the
	// 8 MiB ring's end.
	var held *MessageView
	var starts []uint64
	for i := range 3 {
		m := send(3<<20/4, float32(i))
		starts = append(starts, m.start)
		if held != nil {
			held.Release()
		}
		held = m
	}
	big := starts[1]
	held.Release()
	// 256 KiB each, one at a time.
	var small uint64
	for i := range 4 {
		m := send(256<<10/4, float32(10+i))
		starts = append(starts, m.start)
		small = m.end - m.start
		m.Release()
	}
	want := []uint64{0, big, ring, 2 * ring, 2*ring + small, 3 * ring, 3*ring + small}
	if !slices.Equal(starts, want) {
		t.Errorf("messages started at %v, want %v", starts, want)
	}
	if got := control(server.fr.shared.own).Load(); got != 3*ring+2*small {
		t.Errorf("consumed %d after every release, want %d", got, 3*ring+2*small)
	}
}

// Releases in any order publish only the released prefix of the ring.
func TestSharedReleasesOutOfOrder(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	client, server := sharedPair(t, logs, testConfig("server", logs))
	var ms []*MessageView
	for i := range 3 {
		ms = append(ms, relay(t, client, server, filled(32<<10, float32(i))))
	}
	ends := []uint64{ms[0].end, ms[1].end, ms[2].end}
	consumed := func() uint64 { return control(server.fr.shared.own).Load() }
	for _, step := range []struct {
		release int
		want    uint64
	}{{1, 0}, {0, ends[1]}, {2, ends[2]}} {
		ms[step.release].Release()
		if got := consumed(); got != step.want {
			t.Fatalf("after releasing message %d the consumed position is %d, want %d", step.release, got, step.want)
		}
	}
}

// A message taken in place stays readable after its sender has gone, and
// the rings are unmapped once it is released.
func TestSharedMessageOutlivesItsSender(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	client, server := sharedPair(t, logs, testConfig("server", logs))
	want := filled(64<<10, 3)
	m := relay(t, client, server, want)
	client.Close()
	server.Close()
	wantFloats(t, m, want)
	sh := server.fr.shared
	if sh.own == nil {
		t.Fatal("rings unmapped while a message lies in one")
	}
	m.Release()
	if sh.own != nil || sh.peer != nil {
		t.Error("rings still mapped after the connection closed and its last message was released")
	}
}

// A message taken in place and dropped without Release gives its bytes
// back when it is collected.
func TestSharedMessageDroppedUnreleasedIsReclaimed(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	client, server := sharedPair(t, logs, testConfig("server", logs))
	end := receiveAndDrop(t, client, server)
	deadline := time.Now().Add(5 * time.Second)
	for control(server.fr.shared.own).Load() != end {
		if time.Now().After(deadline) {
			t.Fatal("a dropped message's ring bytes were never given back")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// receiveAndDrop has server take a message in place and forget it,
// returning where it ended in the ring; its frame is gone once it returns.
//
//go:noinline
func receiveAndDrop(t *testing.T, client, server *Conn) uint64 {
	m := relay(t, client, server, filled(64<<10, 1))
	if m.ring == nil {
		t.Fatal("the message was not taken in the ring")
	}
	return m.end
}

// Memory is shared only on a same-host socket, outside TLS, where both
// ends allow it.
func TestSharedMemoryOnlyWhereBothOffer(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	pki := newTestPKI(t)
	now := time.Now()
	off := func(c Config) Config { c.NoSharedMemory = true; return c }
	tcpOnly := func(c Config) Config { c.TCPOnly = true; return c }
	for name, c := range map[string]struct {
		server, client Config
		shared         bool
	}{
		"both":           {testConfig("server", logs), testConfig("client", logs), true},
		"server off":     {off(testConfig("server", logs)), testConfig("client", logs), false},
		"client off":     {testConfig("server", logs), off(testConfig("client", logs)), false},
		"tcp only":       {tcpOnly(testConfig("server", logs)), testConfig("client", logs), false},
		"tls":            {tlsConfig("server", logs, pki.config(t, "server", now, time.Hour)), tlsConfig("client", logs, pki.config(t, "client", now, time.Hour)), false},
		"older listener": {func() Config { c := testConfig("server", logs); c.refuseFeatures = true; return c }(), testConfig("client", logs), false},
	} {
		t.Run(name, func(t *testing.T) {
			conn := dialEcho(t, c.server, c.client)
			if got := conn.fr.shared != nil; got != c.shared {
				t.Fatalf("shares memory: %t, want %t", got, c.shared)
			}
			want := filled(64<<10, 5)
			if err := conn.Send(testContext(t), 1, floatMessage(want)); err != nil {
				t.Fatal(err)
			}
			m, err := conn.RecvShared(testContext(t), 1)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			wantFloats(t, m, want)
		})
	}
}

// rawShared runs the dialer's handshake up to the exchange of rings on
// the twin of srv, leaving the caller to send its own MsgShared.
func rawShared(t *testing.T, srv *echoServer, logs *logSink) (*net.UnixConn, *framer) {
	t.Helper()
	cfg, err := testConfig("client", logs).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("unix", twinName(srv.addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	f := &framer{nc: nc, r: nc}
	if _, err := dialerHandshake(f, &cfg, ""); err != nil {
		t.Fatal(err)
	}
	if !f.shareAgreed {
		t.Fatal("the listener did not offer shared memory")
	}
	return nc.(*net.UnixConn), f
}

// memfd makes a memfd of size bytes with the given seals.
func memfd(t *testing.T, size int, seals int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// The ring an end hands its peer cannot be resized, nor mapped for
// writing by anyone but its owner.
func TestSharedSegmentIsSealed(t *testing.T) {
	fd, mem, err := newSegment(minSharedRing)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	defer unix.Munmap(mem)
	mem[sharedControl] = 1 // the owner's own mapping stays writable
	if err := unix.Ftruncate(fd, sharedControl); err == nil {
		t.Error("the segment shrank")
	}
	if w, err := unix.Mmap(fd, 0, sharedControl+minSharedRing, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		unix.Munmap(w)
		t.Error("a second mapping could write the ring")
	}
	r, err := mapPeerSegment(fd, minSharedRing)
	if err != nil {
		t.Fatalf("a peer cannot map it for reading: %v", err)
	}
	defer unix.Munmap(r)
	if r[sharedControl] != 1 {
		t.Error("the peer's mapping does not see the owner's writes")
	}
}

// A listener refuses a ring it cannot trust: unsealed (the peer could
// truncate it under our reads), of another size than announced, announced
// without a descriptor, or with several.
func TestSharedMemoryRefusesBadSegments(t *testing.T) {
	checkLeaks(t)
	const ring = minSharedRing
	for name, c := range map[string]struct {
		announce uint64
		fds      func(t *testing.T) []int
		log      string
	}{
		"unsealed": {ring, func(t *testing.T) []int { return []int{memfd(t, sharedControl+ring, 0)} }, "not sealed against shrinking"},
		"size":     {ring, func(t *testing.T) []int { return []int{memfd(t, sharedControl+ring/2, unix.F_SEAL_SHRINK)} }, "announced"},
		"tiny":     {4096, func(t *testing.T) []int { return []int{memfd(t, sharedControl+4096, unix.F_SEAL_SHRINK)} }, "ring of 4096 bytes"},
		"no fd":    {ring, func(t *testing.T) []int { return nil }, "carries 0 descriptors"},
		"two fds": {ring, func(t *testing.T) []int {
			return []int{memfd(t, sharedControl+ring, unix.F_SEAL_SHRINK), memfd(t, sharedControl+ring, unix.F_SEAL_SHRINK)}
		}, "carries 2 descriptors"},
	} {
		t.Run(name, func(t *testing.T) {
			logs := &logSink{}
			srv := startEcho(t, testConfig("server", logs))
			uc, f := rawShared(t, srv, logs)
			f.sendSeq++
			frame := AppendFrame(nil, Header{Type: MsgShared, Seq: f.sendSeq}, binary.LittleEndian.AppendUint64(nil, c.announce))
			var oob []byte
			if fds := c.fds(t); len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			if _, _, err := uc.WriteMsgUnix(frame, oob, nil); err != nil {
				t.Fatal(err)
			}
			expectHangUp(t, uc)
			logs.waitFor(t, "rejected peer", c.log)
		})
	}
}

// A peer that could not make a ring (memfd_create refused, say) sends
// none; the connection goes on without shared memory, both ways.
func TestSharedMemoryDeclinedByThePeer(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	srv := startEcho(t, testConfig("server", logs))
	uc, f := rawShared(t, srv, logs)
	if err := f.sendSegment(uc, -1, 0); err != nil {
		t.Fatal(err)
	}
	if peer, err := f.receiveSegment(uc); err != nil || peer == nil {
		t.Fatalf("the listener offered no ring (%v)", err)
	} else {
		unix.Munmap(peer)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		srv.mu.Lock()
		conns := slices.Clone(srv.conns)
		srv.mu.Unlock()
		if len(conns) == 1 {
			if conns[0].fr.shared != nil {
				t.Fatal("the listener shares memory with a peer that sent no ring")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener never accepted the connection")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A peer that sends a shared frame anywhere but where its next message
// must lie, or one on a connection without rings, is cut off.
func TestSharedFramesOutOfPlaceCloseTheConnection(t *testing.T) {
	checkLeaks(t)
	shared := func(pos uint64, n int) []byte {
		desc := sharedDesc(pos, n)
		return AppendFrame(nil, Header{Type: MsgGradient, Stream: 1, Seq: 1, Flags: flagShared}, desc)
	}
	withSeq := func(frame []byte, seq uint64) []byte {
		binary.LittleEndian.PutUint64(frame[12:20], seq)
		return frame
	}
	t.Run("wrong position", func(t *testing.T) {
		logs := &logSink{}
		srv := startEcho(t, testConfig("server", logs))
		nc, f := rawAuthedOn(t, "unix", twinName(srv.addr()), testConfig("client", logs))
		if f.shared == nil {
			t.Fatal("no rings shared")
		}
		if _, err := nc.Write(withSeq(shared(uint64(sharedMinPayload), sharedMinPayload), f.sendSeq+1)); err != nil {
			t.Fatal(err)
		}
		expectHangUp(t, nc)
		logs.waitFor(t, fmt.Sprintf("payload at position %d, want 0", sharedMinPayload))
	})
	t.Run("larger than the ring", func(t *testing.T) {
		logs := &logSink{}
		srv := startEcho(t, testConfig("server", logs))
		nc, f := rawAuthedOn(t, "unix", twinName(srv.addr()), testConfig("client", logs))
		if _, err := nc.Write(withSeq(shared(0, defaultSharedRing+1), f.sendSeq+1)); err != nil {
			t.Fatal(err)
		}
		expectHangUp(t, nc)
		logs.waitFor(t, fmt.Sprintf("payload of %d bytes in a ring of %d", defaultSharedRing+1, defaultSharedRing))
	})
	t.Run("no rings", func(t *testing.T) {
		logs := &logSink{}
		srv := startEcho(t, testConfig("server", logs))
		nc, f := rawAuthed(t, srv.addr(), testConfig("client", logs))
		if _, err := nc.Write(withSeq(shared(0, sharedMinPayload), f.sendSeq+1)); err != nil {
			t.Fatal(err)
		}
		expectHangUp(t, nc)
		logs.waitFor(t, "where no ring was shared")
	})
}

// A peer whose control page claims it consumed more of our ring than we
// wrote is cut off when we next place a message.
func TestSharedMemoryRefusesImpossibleConsumedPosition(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	client, server := sharedPair(t, logs, testConfig("server", logs))
	ctx := testContext(t)
	control(client.fr.shared.own).Store(1 << 40) // the client's word: how much of the server's ring it consumed
	err := server.Send(ctx, 1, floatMessage(filled(64<<10, 0)))
	if err == nil {
		t.Fatal("a send trusted a consumed position past what was written")
	}
	logs.waitFor(t, "consumed 1099511627776 bytes of ours, but 0 were written")
	if _, err := client.Recv(ctx, 1); err == nil {
		t.Error("the peer's connection stayed open")
	}
}
