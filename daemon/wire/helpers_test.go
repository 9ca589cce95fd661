package wire

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/internal/syncbuf"
)

// checkLeaks fails the test if goroutines it started outlive it. Call it
// first, so that its cleanup runs after every other.
func checkLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// logSink collects log output for assertions.
type logSink struct{ syncbuf.Buffer }

func (s *logSink) logger() *slog.Logger {
	w := io.Writer(s)
	if testing.Verbose() {
		w = io.MultiWriter(s, os.Stderr)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitFor waits (at most 5s) until the log contains every substring.
func (s *logSink) waitFor(t *testing.T, subs ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		log := s.String()
		missing := ""
		for _, sub := range subs {
			if !strings.Contains(log, sub) {
				missing = sub
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q; log:\n%s", missing, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var testSecret = []byte("test-cluster-secret-0123456789")

// testConfig is a config with timeouts short enough for tests.
func testConfig(id string, logs *logSink) Config {
	return Config{
		NodeID:           id,
		Secret:           testSecret,
		HandshakeTimeout: 2 * time.Second,
		ReadTimeout:      2 * time.Second,
		WriteTimeout:     2 * time.Second,
		IdleTimeout:      10 * time.Second,
		DialTimeout:      2 * time.Second,
		Logger:           logs.logger(),
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// echoServer accepts connections and sends every message received on stream
// 1 back on stream 1.
type echoServer struct {
	ln     *Listener
	logs   *logSink
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []*Conn
}

func startEcho(t *testing.T, cfg Config) *echoServer {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.stop)
	return s
}

func (s *echoServer) addr() string { return s.ln.Addr().String() }

func (s *echoServer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept(s.ctx)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go s.echo(c)
	}
}

func (s *echoServer) echo(c *Conn) {
	defer s.wg.Done()
	for {
		m, err := c.Recv(s.ctx, 1)
		if err != nil {
			return
		}
		if err := c.Send(s.ctx, 1, ownedMessage(m)); err != nil {
			return
		}
	}
}

func (s *echoServer) stop() {
	s.cancel()
	s.ln.Close()
	s.mu.Lock()
	conns := s.conns
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
}

// ownedMessage copies a received message into one that can be sent.
func ownedMessage(v *MessageView) *Message {
	m := &Message{Type: v.Type, Meta: v.Meta, Text: v.Text}
	for i := range v.Tensors {
		m.Tensors = append(m.Tensors, v.Tensors[i].Tensor())
	}
	return m
}

// dialEcho starts an echo server of server's config and dials it with
// client's; the connection closes when the test ends.
func dialEcho(t *testing.T, server, client Config) *Conn {
	t.Helper()
	srv := startEcho(t, server)
	c, err := Dial(testContext(t), srv.addr(), client, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echoOK checks that a well-behaved client gets its message echoed by addr.
func echoOK(t *testing.T, addr string, cfg Config) {
	t.Helper()
	ctx := testContext(t)
	c, err := Dial(ctx, addr, cfg, "")
	if err != nil {
		t.Fatalf("well-behaved client: %v", err)
	}
	defer c.Close()
	m := &Message{Type: MsgActivation, Meta: Meta{Step: 9}, Tensors: []Tensor{F32Tensor([]float32{1, 2, 3}, 3)}}
	if err := c.Send(ctx, 1, m); err != nil {
		t.Fatalf("well-behaved client: send: %v", err)
	}
	got, err := c.Recv(ctx, 1)
	if err != nil {
		t.Fatalf("well-behaved client: recv: %v", err)
	}
	data, _ := got.Tensors[0].Float32s(nil)
	if got.Meta.Step != 9 || !reflect.DeepEqual(data, []float32{1, 2, 3}) {
		t.Fatalf("well-behaved client: echo is %+v %v", got.Meta, data)
	}
}

// rawAuthed dials addr and runs the dialer's handshake, leaving the caller a
// raw socket (and the frame numbering) to misbehave on.
func rawAuthed(t *testing.T, addr string, cfg Config) (net.Conn, *framer) {
	t.Helper()
	return rawAuthedOn(t, "tcp", addr, cfg)
}

// rawAuthedOn is rawAuthed on another network ("unix": a twin's name).
func rawAuthedOn(t *testing.T, network, addr string, cfg Config) (net.Conn, *framer) {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_, fr, err := handshake(testContext(t), nc, &cfg, roleDialer, "")
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return nc, fr
}

// expectHangUp fails unless the peer closes nc within 5s.
func expectHangUp(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
}

// dataFrame is a valid frame carrying m on stream with sequence number seq.
func dataFrame(t *testing.T, stream uint32, seq uint64, m *Message) []byte {
	t.Helper()
	payload, err := AppendMessage(nil, m, HardMaxPayload)
	if err != nil {
		t.Fatal(err)
	}
	return AppendFrame(nil, Header{Type: m.Type, Stream: stream, Seq: seq}, payload)
}
