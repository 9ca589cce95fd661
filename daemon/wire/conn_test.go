package wire

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"reflect"
	"testing"
	"time"
)

func TestConnStreamsRoundTrip(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ln, err := Listen("127.0.0.1:0", testConfig("server", logs))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := testContext(t)
	client, err := Dial(ctx, ln.Addr().String(), testConfig("client", logs), "")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	large := make([]float32, 4<<20) // 16 MiB
	for i := range large {
		large[i] = float32(i%1000) - 0.25
	}
	sent := []*Message{
		{Type: MsgActivation, Meta: Meta{Micro: 0}, Tensors: []Tensor{F32Tensor(nil, 0, 16)}},
		{Type: MsgActivation, Meta: Meta{Micro: 1}, Tensors: []Tensor{F32Tensor(large, 4096, 1024)}},
		{Type: MsgPull, Meta: Meta{Key: 3}, Tensors: []Tensor{I64Tensor([]int64{5, math.MaxInt64}, 2)}},
		{Type: MsgError, Text: "no such table"},
	}
	// Alternate two streams; each must keep its own order.
	for i, m := range sent {
		if err := client.Send(ctx, uint32(1+i%2), m); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range sent {
		got, err := server.Recv(ctx, uint32(1+i%2))
		if err != nil {
			t.Fatal(err)
		}
		if got.Type != m.Type || got.Meta != m.Meta || got.Text != m.Text || got.Stream != uint32(1+i%2) {
			t.Fatalf("message %d: got %+v", i, got)
		}
		for j := range m.Tensors {
			back := got.Tensors[j].Tensor()
			if !reflect.DeepEqual(nilIfEmpty(back.F32), nilIfEmpty(m.Tensors[j].F32)) || !reflect.DeepEqual(nilIfEmpty(back.I64), nilIfEmpty(m.Tensors[j].I64)) {
				t.Fatalf("message %d tensor %d differs", i, j)
			}
		}
	}
}

func TestConnRejectsBadSendsAndStaysOpen(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := testConfig("client", logs)
	cfg.MaxPayload = 1 << 10
	srv := startEcho(t, testConfig("server", logs))
	ctx := testContext(t)
	c, err := Dial(ctx, srv.addr(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(ctx, 1, &Message{Type: MsgPushDense, Tensors: []Tensor{F32Tensor(make([]float32, 1000), 1000)}}); err == nil {
		t.Error("sent a payload over MaxPayload")
	}
	if err := c.Send(ctx, 0, &Message{Type: MsgAck}); err == nil {
		t.Error("sent on stream 0")
	}
	if err := c.Send(ctx, 1, &Message{Type: MsgPing}); err == nil {
		t.Error("sent a control type")
	}
	if _, err := c.Recv(ctx, 0); err == nil {
		t.Error("received on stream 0")
	}
	if err := c.Err(); err != nil {
		t.Fatalf("a refused send closed the connection: %v", err)
	}
	if err := c.Send(ctx, 1, &Message{Type: MsgAck, Meta: Meta{Step: 4}}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(ctx, 1); err != nil || m.Meta.Step != 4 {
		t.Fatalf("echo after refused sends: %+v, %v", m, err)
	}
}

// Each misbehaving peer must be disconnected with its reason logged, and the
// server must go on serving a well-behaved client.
func TestServerDisconnectsMisbehavingPeers(t *testing.T) {
	good := &Message{Type: MsgActivation, Tensors: []Tensor{F32Tensor([]float32{1}, 1)}}
	cases := []struct {
		name   string
		reason string // in the server's log
		act    func(t *testing.T, addr string, cfg Config)
	}{
		{"garbage before the handshake", "bad magic", func(t *testing.T, addr string, _ Config) {
			nc := rawDial(t, addr)
			junk := make([]byte, 256)
			rand.Read(junk)
			junk[0] = 'X'
			nc.Write(junk)
			expectHangUp(t, nc)
		}},
		{"oversized handshake frame", "length over limit", func(t *testing.T, addr string, _ Config) {
			nc := rawDial(t, addr)
			var h [HeaderSize]byte
			PutHeader(h[:], Header{Type: MsgHello, Seq: 1, Length: 1 << 20})
			nc.Write(h[:])
			expectHangUp(t, nc)
		}},
		{"data frame instead of hello", "want hello", func(t *testing.T, addr string, _ Config) {
			nc := rawDial(t, addr)
			nc.Write(dataFrame(t, 1, 1, good))
			expectHangUp(t, nc)
		}},
		{"garbage after the handshake", "bad magic", func(t *testing.T, addr string, cfg Config) {
			nc, _ := rawAuthed(t, addr, cfg)
			junk := make([]byte, 4096)
			rand.Read(junk)
			junk[0] = 'X'
			nc.Write(junk)
			expectHangUp(t, nc)
		}},
		{"truncated frame", "short read", func(t *testing.T, addr string, cfg Config) {
			nc, fr := rawAuthed(t, addr, cfg)
			frame := dataFrame(t, 1, fr.sendSeq+1, good)
			nc.Write(frame[:len(frame)-3])
			nc.(*net.TCPConn).CloseWrite()
			expectHangUp(t, nc)
		}},
		{"oversized length", "length over limit", func(t *testing.T, addr string, cfg Config) {
			nc, fr := rawAuthed(t, addr, cfg)
			var h [HeaderSize]byte
			PutHeader(h[:], Header{Type: MsgActivation, Stream: 1, Seq: fr.sendSeq + 1, Length: HardMaxPayload})
			nc.Write(h[:])
			expectHangUp(t, nc)
		}},
		{"corrupt payload", "CRC32C mismatch", func(t *testing.T, addr string, cfg Config) {
			nc, fr := rawAuthed(t, addr, cfg)
			frame := dataFrame(t, 1, fr.sendSeq+1, good)
			frame[len(frame)-1] ^= 0x40
			nc.Write(frame)
			expectHangUp(t, nc)
		}},
		{"valid frame, malformed message", "trailing bytes", func(t *testing.T, addr string, cfg Config) {
			nc, fr := rawAuthed(t, addr, cfg)
			payload, _ := AppendMessage(nil, good, 1<<20)
			payload = append(payload, 0, 0)
			nc.Write(AppendFrame(nil, Header{Type: MsgActivation, Stream: 1, Seq: fr.sendSeq + 1}, payload))
			expectHangUp(t, nc)
		}},
		{"sequence gap", "sequence number", func(t *testing.T, addr string, cfg Config) {
			nc, fr := rawAuthed(t, addr, cfg)
			nc.Write(dataFrame(t, 1, fr.sendSeq+2, good))
			expectHangUp(t, nc)
		}},
		{"data on stream 0", "stream 0", func(t *testing.T, addr string, cfg Config) {
			nc, fr := rawAuthed(t, addr, cfg)
			nc.Write(dataFrame(t, 0, fr.sendSeq+1, good))
			expectHangUp(t, nc)
		}},
		{"handshake frame after the handshake", "unexpected hello", func(t *testing.T, addr string, cfg Config) {
			nc, fr := rawAuthed(t, addr, cfg)
			nc.Write(AppendFrame(nil, Header{Type: MsgHello, Seq: fr.sendSeq + 1}, nil))
			expectHangUp(t, nc)
		}},
		{"silent before the handshake", "i/o timeout", func(t *testing.T, addr string, _ Config) {
			nc := rawDial(t, addr)
			expectHangUp(t, nc)
		}},
		{"stalled mid-frame", "i/o timeout", func(t *testing.T, addr string, cfg Config) {
			nc, fr := rawAuthed(t, addr, cfg)
			frame := dataFrame(t, 1, fr.sendSeq+1, good)
			nc.Write(frame[:HeaderSize+2])
			expectHangUp(t, nc)
		}},
		{"stalled mid-header", "i/o timeout", func(t *testing.T, addr string, cfg Config) {
			nc, _ := rawAuthed(t, addr, cfg)
			nc.Write([]byte("HPSW"))
			expectHangUp(t, nc)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkLeaks(t)
			logs := &logSink{}
			cfg := testConfig("server", logs)
			cfg.HandshakeTimeout = 300 * time.Millisecond
			cfg.ReadTimeout = 300 * time.Millisecond
			cfg.IdleTimeout = 600 * time.Millisecond
			cfg.MaxPayload = 1 << 20
			srv := startEcho(t, cfg)
			c.act(t, srv.addr(), testConfig("rogue", logs))
			logs.waitFor(t, c.reason)
			echoOK(t, srv.addr(), testConfig("client", logs))
		})
	}
}

func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

func TestKilledPeerWakesWaitersPromptly(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ln, err := Listen("127.0.0.1:0", testConfig("server", logs))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := testContext(t)
	accepted := make(chan *Conn, 1)
	go func() {
		c, _ := ln.Accept(ctx)
		accepted <- c
	}()
	nc, fr := rawAuthed(t, ln.Addr().String(), testConfig("victim", logs))
	server := <-accepted
	if server == nil {
		t.Fatal("no connection accepted")
	}
	defer server.Close()

	// One message in flight before the kill must still be delivered.
	nc.Write(dataFrame(t, 2, fr.sendSeq+1, &Message{Type: MsgAck, Meta: Meta{Step: 1}}))
	errs := make(chan error, 3)
	for _, stream := range []uint32{1, 1, 3} {
		go func() {
			_, err := server.Recv(ctx, stream)
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond) // let the waiters block
	start := time.Now()
	nc.(*net.TCPConn).SetLinger(0) // reset, as a crashed process would
	nc.Close()
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("waiter got %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not woken by the peer's death")
		}
	}
	t.Logf("waiters woken %v after the kill", time.Since(start))
	if m, err := server.Recv(ctx, 2); err != nil || m.Meta.Step != 1 {
		t.Errorf("message that arrived before the kill: %+v, %v", m, err)
	}
	if err := server.Send(ctx, 1, &Message{Type: MsgAck}); !errors.Is(err, ErrClosed) {
		t.Errorf("send after the kill: %v, want ErrClosed", err)
	}
	logs.waitFor(t, "connection closed")
}

func TestCloseWakesWaitersAndIsIdempotent(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	srv := startEcho(t, testConfig("server", logs))
	ctx := testContext(t)
	c, err := Dial(ctx, srv.addr(), testConfig("client", logs), "")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Recv(ctx, 5)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("waiter got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the waiter")
	}
	if err := c.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("Err after Close = %v", err)
	}
	// The server sees a goodbye, not a failure.
	logs.waitFor(t, "peer closed the connection")

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	c2, err := Dial(ctx, srv.addr(), testConfig("client", logs), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Recv(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Recv past its context: %v", err)
	}
}

func TestStalledReceiverClosesConnection(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := testConfig("server", logs)
	cfg.QueueDepth = 2
	cfg.ReadTimeout = 200 * time.Millisecond
	ln, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := testContext(t)
	client, err := Dial(ctx, ln.Addr().String(), testConfig("client", logs), "")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	for i := range 4 { // nobody reads stream 1 on the server
		client.Send(ctx, 1, &Message{Type: MsgAck, Meta: Meta{Step: uint64(i)}})
	}
	select {
	case <-server.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the server never gave up on the stalled stream")
	}
	logs.waitFor(t, "receiver stalled")
	// What was queued is still there to read.
	for i := range 2 {
		if m, err := server.Recv(ctx, 1); err != nil || m.Meta.Step != uint64(i) {
			t.Errorf("queued message %d: %+v, %v", i, m, err)
		}
	}
}

func TestTooManyStreamsClosesConnection(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := testConfig("server", logs)
	cfg.MaxStreams = 3
	srv := startEcho(t, cfg)
	nc, fr := rawAuthed(t, srv.addr(), testConfig("rogue", logs))
	for s := range uint32(5) {
		fr.sendSeq++
		nc.Write(dataFrame(t, 10+s, fr.sendSeq, &Message{Type: MsgAck}))
	}
	expectHangUp(t, nc)
	logs.waitFor(t, "limit of 3 streams")
}

func TestIdleConnectionKeptAliveByPings(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := func(id string) Config {
		c := testConfig(id, logs)
		c.IdleTimeout = 300 * time.Millisecond
		return c
	}
	srv := startEcho(t, cfg("server"))
	ctx := testContext(t)
	c, err := Dial(ctx, srv.addr(), cfg("client"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(time.Second) // more than three idle timeouts
	if err := c.Err(); err != nil {
		t.Fatalf("idle connection closed: %v", err)
	}
	if err := c.Send(ctx, 1, &Message{Type: MsgAck}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recv(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

func TestSilentPeerHitsIdleTimeout(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := testConfig("server", logs)
	cfg.IdleTimeout = 300 * time.Millisecond
	srv := startEcho(t, cfg)
	nc, _ := rawAuthed(t, srv.addr(), testConfig("mute", logs))
	start := time.Now()
	// The server pings us; read them, send nothing.
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept a silent peer")
	}
	logs.waitFor(t, "i/o timeout")
	t.Logf("silent peer dropped after %v", time.Since(start))
}

func TestSendHonoursContextWhileWaitingToWrite(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ctx := testContext(t)
	c := dialEcho(t, testConfig("server", logs), testConfig("client", logs))
	c.wlock <- struct{}{} // someone else is writing
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := c.Send(short, 1, &Message{Type: MsgAck})
	<-c.wlock
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send = %v, want DeadlineExceeded", err)
	}
	if c.Err() != nil {
		t.Errorf("an abandoned wait closed the connection: %v", c.Err())
	}
}

func TestFrameHeaderSequenceStartsAfterHandshake(t *testing.T) {
	// The first data frame's sequence number follows the handshake's frames:
	// two from each side in HMAC mode.
	checkLeaks(t)
	logs := &logSink{}
	srv := startEcho(t, testConfig("server", logs))
	nc, fr := rawAuthed(t, srv.addr(), testConfig("raw", logs))
	if fr.sendSeq != 2 || fr.recvSeq != 2 {
		t.Fatalf("after the handshake: sent %d, received %d frames", fr.sendSeq, fr.recvSeq)
	}
	nc.Write(dataFrame(t, 1, 3, &Message{Type: MsgAck, Meta: Meta{Job: 77}}))
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, payload, err := ReadFrame(nc, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(h.Type, payload, 1<<20)
	if err != nil || h.Seq != 3 || m.Meta.Job != 77 || binary.LittleEndian.Uint64(payload) != 77 {
		t.Fatalf("echo: seq %d, %+v, %v", h.Seq, m, err)
	}
}

func TestQueueByteBudget(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := testConfig("server", logs)
	cfg.QueueBytes = 2000
	cfg.ReadTimeout = 300 * time.Millisecond
	ln, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := testContext(t)
	client, err := Dial(ctx, ln.Addr().String(), testConfig("client", logs), "")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	msg := func(step uint64) *Message {
		return &Message{Type: MsgPushDense, Meta: Meta{Step: step}, Tensors: []Tensor{F32Tensor(make([]float32, 200), 200)}}
	}
	payload, _ := AppendMessage(nil, msg(0), 1<<20)
	size := len(payload) // 880 bytes
	// Two fit in 2000 bytes, the third waits; reading frees room in time.
	for i := range 3 {
		if err := client.Send(ctx, uint32(1+i), msg(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if got := server.queuedBytes(); got != 2*size {
		t.Errorf("%d bytes queued, want 2 messages' worth (%d)", got, 2*size)
	}
	for i := range 3 {
		if m, err := server.Recv(ctx, uint32(1+i)); err != nil || m.Meta.Step != uint64(i) {
			t.Fatalf("message %d: %+v, %v", i, m, err)
		}
	}
	if got := server.queuedBytes(); got != 0 {
		t.Errorf("%d bytes still counted after reading everything", got)
	}
	// One message larger than the whole budget still gets through alone.
	huge := &Message{Type: MsgPushDense, Tensors: []Tensor{F32Tensor(make([]float32, 1000), 1000)}}
	if err := client.Send(ctx, 9, huge); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Recv(ctx, 9); err != nil {
		t.Fatalf("message over the budget: %v", err)
	}
	// Nobody reading: the third message stalls the reader and the
	// connection is closed once ReadTimeout has passed.
	for i := range 3 {
		client.Send(ctx, 1, msg(uint64(10+i)))
	}
	select {
	case <-server.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the reader waited for room forever")
	}
	logs.waitFor(t, "receiver stalled", "bytes queued")
}
