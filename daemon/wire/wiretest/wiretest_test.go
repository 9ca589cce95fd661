package wiretest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/internal/syncbuf"
)

func checkLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

func config(id string, logs io.Writer) wire.Config {
	return wire.Config{
		NodeID:           id,
		Secret:           []byte("wiretest-secret-0123456789"),
		HandshakeTimeout: time.Second,
		ReadTimeout:      time.Second,
		WriteTimeout:     time.Second,
		IdleTimeout:      600 * time.Millisecond,
		DialTimeout:      time.Second,
		Logger:           slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// pair starts transports "a" and "b"; a dials b through a bridge.
func pair(t *testing.T, logs io.Writer) (a, b *wire.TCPTransport, br *Bridge) {
	t.Helper()
	var err error
	b, err = wire.NewTCPTransport("127.0.0.1:0", config("b", logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	br, err = NewBridge(b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close() })
	a, err = wire.NewTCPTransport("127.0.0.1:0", config("a", logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := b.AddPeer("a", ""); err != nil {
		t.Fatal(err)
	}
	if err := a.AddPeer("b", br.Addr()); err != nil {
		t.Fatal(err)
	}
	return a, b, br
}

func ack(step uint64) *wire.Message {
	return &wire.Message{Type: wire.MsgAck, Meta: wire.Meta{Step: step}}
}

// exchange sends one message a -> b and returns the error of either half;
// messages of earlier steps still in flight are skipped.
func exchange(from, to wire.Transport, fromID, toID string, step uint64, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := from.Send(ctx, toID, 1, ack(step)); err != nil {
		return err
	}
	for {
		m, err := to.Recv(ctx, fromID, 1)
		if err != nil {
			return err
		}
		// An earlier attempt whose wait ran out may have been delivered
		// after all: that message is stale, not this one lost.
		if m.Meta.Step < step {
			continue
		}
		if m.Meta.Step != step {
			return fmt.Errorf("got step %d, want %d", m.Meta.Step, step)
		}
		return nil
	}
}

// eventually retries an exchange until it works (5s).
func eventually(t *testing.T, from, to wire.Transport, fromID, toID string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for step := uint64(1000); ; step++ {
		err := exchange(from, to, fromID, toID, step, 300*time.Millisecond)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s -> %s never recovered: %v", fromID, toID, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitDone(t *testing.T, c *wire.Conn, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the connection stayed open", what)
	}
}

func TestBridgeForwardsAndCuts(t *testing.T) {
	checkLeaks(t)
	logs := &syncbuf.Buffer{}
	a, b, br := pair(t, logs)
	if err := exchange(a, b, "a", "b", 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := a.PeerConn(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	br.Cut()
	waitDone(t, c, "cut")
	eventually(t, a, b, "a", "b")
	eventually(t, b, a, "b", "a")
}

func TestBridgeBlackholeTripsIdleTimeout(t *testing.T) {
	checkLeaks(t)
	logs := &syncbuf.Buffer{}
	a, b, br := pair(t, logs)
	if err := exchange(a, b, "a", "b", 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c, _ := a.PeerConn(context.Background(), "b")
	br.Blackhole()
	waitDone(t, c, "blackhole")
	// Whichever end's idle deadline fires first closes the link; its log
	// line may land just after the other end sees the close.
	deadline := time.Now().Add(2 * time.Second)
	for !logs.Contains("i/o timeout") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !logs.Contains("i/o timeout") {
		t.Errorf("closed for %v, and no end logged a timeout", c.Err())
	}
	if err := exchange(a, b, "a", "b", 2, 300*time.Millisecond); err == nil {
		t.Error("a message crossed a blackhole")
	}
	br.Unblackhole()
	eventually(t, a, b, "a", "b")
}

func TestBridgeCorruptionClosesConnection(t *testing.T) {
	checkLeaks(t)
	logs := &syncbuf.Buffer{}
	a, b, br := pair(t, logs)
	if err := exchange(a, b, "a", "b", 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c, _ := a.PeerConn(context.Background(), "b")
	br.Corrupt(1)
	big := &wire.Message{Type: wire.MsgPushDense, Tensors: []wire.Tensor{wire.F32Tensor(make([]float32, 1000), 1000)}}
	a.Send(context.Background(), "b", 1, big)
	waitDone(t, c, "corruption")
	deadline := time.Now().Add(5 * time.Second)
	for !logs.Contains("CRC32C mismatch") && !logs.Contains("bad magic") && !logs.Contains("malformed") {
		if time.Now().After(deadline) {
			t.Fatal("no decode failure logged")
		}
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, a, b, "a", "b")
}

func TestBridgeDelayAndReject(t *testing.T) {
	checkLeaks(t)
	logs := &syncbuf.Buffer{}
	a, b, br := pair(t, logs)
	if err := exchange(a, b, "a", "b", 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	br.Delay(150 * time.Millisecond)
	start := time.Now()
	if err := exchange(a, b, "a", "b", 2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("delayed message arrived after %v", took)
	}
	br.Delay(0)
	br.Reject(true)
	c, _ := a.PeerConn(context.Background(), "b")
	br.Cut()
	waitDone(t, c, "cut")
	time.Sleep(200 * time.Millisecond) // a few refused redials
	if br.Links() != 0 {
		t.Errorf("%d links while rejecting", br.Links())
	}
	if err := exchange(a, b, "a", "b", 3, 200*time.Millisecond); err == nil {
		t.Error("a message crossed a bridge that rejects connections")
	}
	br.Reject(false)
	eventually(t, a, b, "a", "b")
}

func TestFaultyDropsDelaysBlackholesAndCuts(t *testing.T) {
	checkLeaks(t)
	logs := &syncbuf.Buffer{}
	ra, rb, _ := pair(t, logs)
	a, b := NewFaulty(ra), NewFaulty(rb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a.DropNext("b", 2)
	for step := range uint64(3) {
		if err := a.Send(ctx, "b", 1, ack(step)); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := b.Recv(ctx, "a", 1); err != nil || m.Meta.Step != 2 {
		t.Fatalf("after dropping two: %+v, %v", m, err)
	}

	a.Delay("b", 100*time.Millisecond)
	start := time.Now()
	if err := exchange(a, b, "a", "b", 4, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("delayed send took %v", took)
	}
	a.Heal("b")

	// Blackholed at the receiver: what arrives meanwhile is discarded.
	b.Blackhole("a")
	if err := exchange(a, b, "a", "b", 5, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("through a blackhole: %v", err)
	}
	b.Heal("a")
	if err := exchange(a, b, "a", "b", 6, 5*time.Second); err != nil {
		t.Fatalf("after healing: %v", err)
	}

	got := make(chan error, 1)
	go func() {
		_, err := b.Recv(ctx, "a", 3)
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.Cut("a")
	select {
	case err := <-got:
		if !errors.Is(err, ErrCut) {
			t.Errorf("waiting Recv on a cut link: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Cut did not wake a waiting Recv")
	}
	if _, err := b.Recv(ctx, "a", 3); !errors.Is(err, ErrCut) {
		t.Errorf("Recv on a cut link: %v", err)
	}
	a.Cut("b")
	if err := a.Send(ctx, "b", 1, ack(7)); !errors.Is(err, ErrCut) {
		t.Errorf("Send on a cut link: %v", err)
	}
	a.Heal("b")
	b.Heal("a")
	if err := exchange(a, b, "a", "b", 8, 5*time.Second); err != nil {
		t.Fatalf("after healing the cut: %v", err)
	}
}
