package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// startTransports starts one transport per id, each a peer of every other.
func startTransports(t *testing.T, logs *logSink, tune func(*Config), ids ...string) map[string]*TCPTransport {
	t.Helper()
	ts := make(map[string]*TCPTransport)
	for _, id := range ids {
		cfg := testConfig(id, logs)
		if tune != nil {
			tune(&cfg)
		}
		tr, err := NewTCPTransport("127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[id] = tr
	}
	for _, a := range ids {
		for _, b := range ids {
			if a != b {
				if err := ts[a].AddPeer(b, ts[b].Addr().String()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return ts
}

// Every pair of nodes exchanges over one connection: over TCP (its two
// ends' addresses match), and between processes on one host over the
// listener's same-host socket (local.go).
func TestTransportExchangeOneConnectionPerPair(t *testing.T) {
	for _, tcpOnly := range []bool{true, false} {
		t.Run(map[bool]string{true: "tcp", false: "same-host socket"}[tcpOnly], func(t *testing.T) {
			exchangeOneConnectionPerPair(t, tcpOnly)
		})
	}
}

func exchangeOneConnectionPerPair(t *testing.T, tcpOnly bool) {
	checkLeaks(t)
	logs := &logSink{}
	ids := []string{"node-a", "node-b", "node-c"}
	ts := startTransports(t, logs, func(c *Config) { c.TCPOnly = tcpOnly }, ids...)
	ctx := testContext(t)
	for i, from := range ids {
		for j, to := range ids {
			if from == to {
				continue
			}
			m := &Message{Type: MsgActivation, Meta: Meta{Stage: uint64(i), Replica: uint64(j)},
				Tensors: []Tensor{F32Tensor([]float32{float32(i), float32(j)}, 2)}}
			if err := ts[from].Send(ctx, to, 7, m); err != nil {
				t.Fatalf("%s -> %s: %v", from, to, err)
			}
			got, err := ts[to].Recv(ctx, from, 7)
			if err != nil {
				t.Fatalf("%s <- %s: %v", to, from, err)
			}
			data, _ := got.Tensors[0].Float32s(nil)
			if got.Meta != m.Meta || data[0] != float32(i) || data[1] != float32(j) {
				t.Fatalf("%s -> %s: got %+v %v", from, to, got.Meta, data)
			}
		}
	}
	for _, a := range ids {
		for _, b := range ids {
			if a >= b {
				continue
			}
			ab, err := ts[a].PeerConn(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			ba, err := ts[b].PeerConn(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			if tcpOnly {
				if ab.LocalAddr().String() != ba.RemoteAddr().String() || ab.RemoteAddr().String() != ts[b].Addr().String() {
					t.Errorf("%s and %s use different connections: %v->%v and %v<-%v", a, b, ab.LocalAddr(), ab.RemoteAddr(), ba.LocalAddr(), ba.RemoteAddr())
				}
				continue
			}
			twin := twinName(ts[b].Addr().String())
			if !isLocalSocket(ab.RemoteAddr()) || ab.RemoteAddr().String() != twin || ba.LocalAddr().String() != twin {
				t.Errorf("%s and %s: %v->%v and %v<-%v, want both on %s", a, b, ab.LocalAddr(), ab.RemoteAddr(), ba.LocalAddr(), ba.RemoteAddr(), twin)
			}
		}
	}
}

func TestTransportPeerRules(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ts := startTransports(t, logs, nil, "a", "b")
	a := ts["a"]
	if err := a.AddPeer("a", "127.0.0.1:1"); err == nil {
		t.Error("added itself as a peer")
	}
	if err := a.AddPeer("b", ts["b"].Addr().String()); err == nil {
		t.Error("added a peer twice")
	}
	if err := a.AddPeer("c", ""); err == nil {
		t.Error("added a larger peer without an address")
	}
	if err := ts["b"].AddPeer("0", ""); err != nil {
		t.Errorf("a smaller peer needs no address: %v", err)
	}
	if err := a.AddPeer("bad id", "127.0.0.1:1"); err == nil {
		t.Error("added a peer with a space in its id")
	}
	ctx := testContext(t)
	if err := a.Send(ctx, "zz", 1, &Message{Type: MsgAck}); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("send to a stranger: %v", err)
	}
	if err := a.RemovePeer("zz"); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("remove a stranger: %v", err)
	}
}

func TestTransportRefusesStrangers(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ts := startTransports(t, logs, nil, "a", "b")
	ctx := testContext(t)
	stranger, err := Dial(ctx, ts["a"].Addr().String(), testConfig("stranger", logs), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	if _, err := stranger.Recv(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("stranger's connection: %v, want it closed", err)
	}
	logs.waitFor(t, "not a peer", "stranger")
	// b is a's peer, but a dials b, never the other way round.
	impostor, err := Dial(ctx, ts["a"].Addr().String(), testConfig("b", logs), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer impostor.Close()
	if _, err := impostor.Recv(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("inbound connection from a peer a dials: %v, want it closed", err)
	}
	logs.waitFor(t, "larger node id")
	if err := ts["a"].Send(ctx, "b", 1, &Message{Type: MsgAck}); err != nil {
		t.Fatalf("a peer after the stranger: %v", err)
	}
}

func TestTransportRemovePeerClosesConnection(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ts := startTransports(t, logs, nil, "a", "b")
	ctx := testContext(t)
	if err := ts["a"].Send(ctx, "b", 1, &Message{Type: MsgAck}); err != nil {
		t.Fatal(err)
	}
	bc, err := ts["b"].PeerConn(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts["a"].RemovePeer("b"); err != nil {
		t.Fatal(err)
	}
	if err := ts["a"].Send(ctx, "b", 1, &Message{Type: MsgAck}); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("send to a removed peer: %v", err)
	}
	select {
	case <-bc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the removed peer's connection stayed open")
	}
}

func TestTransportPeerDeathWakesReceivers(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ts := startTransports(t, logs, nil, "a", "b")
	ctx := testContext(t)
	if err := ts["b"].Send(ctx, "a", 1, &Message{Type: MsgAck}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, pair := range [][2]string{{"a", "b"}, {"b", "a"}} {
		go func() {
			_, err := ts[pair[0]].Recv(ctx, pair[1], 2)
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	ts["b"].Close()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("receiver got %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a receiver was not woken")
		}
	}
	if err := ts["a"].Send(ctx, "b", 1, &Message{Type: MsgAck}); !errors.Is(err, ErrClosed) {
		t.Errorf("send to a dead peer: %v, want ErrClosed at once", err)
	}
	if err := ts["b"].Send(ctx, "a", 1, &Message{Type: MsgAck}); !errors.Is(err, ErrClosed) {
		t.Errorf("send on a closed transport: %v", err)
	}
	if err := ts["b"].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestTransportRedialsAfterDrop(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ts := startTransports(t, logs, nil, "a", "b")
	ctx := testContext(t)
	first, err := ts["a"].PeerConn(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	sendUntilDelivered(t, ts["a"], ts["b"], "a", "b")
	second, _ := ts["a"].PeerConn(ctx, "b")
	if second == first {
		t.Error("still on the closed connection")
	}
}

// sendUntilDelivered retries a send from -> to until one arrives (5s).
func sendUntilDelivered(t *testing.T, from, to *TCPTransport, fromID, toID string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for step := uint64(1); ; step++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := from.Send(ctx, toID, 1, &Message{Type: MsgAck, Meta: Meta{Step: step}})
		if err == nil {
			var m *MessageView
			m, err = to.Recv(ctx, fromID, 1)
			if err == nil && m.Meta.Step != step {
				err = fmt.Errorf("got step %d, want %d", m.Meta.Step, step)
			}
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivery %s -> %s: %v", fromID, toID, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTransportWaitsForFirstConnection(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	tune := func(c *Config) { c.DialTimeout = 300 * time.Millisecond }
	ts := startTransports(t, logs, tune, "b")
	cfg := testConfig("a", logs)
	tune(&cfg)
	a, err := NewTCPTransport("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := ts["b"].AddPeer("a", ""); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	// b waits for a to dial, which it never does: bounded by DialTimeout.
	start := time.Now()
	if err := ts["b"].Send(ctx, "a", 1, &Message{Type: MsgAck}); err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("send without a connection: %v after %v", err, time.Since(start))
	}
	// Once a dials, b's waiting send goes through.
	sent := make(chan error, 1)
	go func() { sent <- ts["b"].Send(ctx, "a", 1, &Message{Type: MsgAck, Meta: Meta{Step: 5}}) }()
	time.Sleep(50 * time.Millisecond)
	if err := a.AddPeer("b", ts["b"].Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send once a dialled: %v", err)
	}
	if m, err := a.Recv(ctx, "b", 1); err != nil || m.Meta.Step != 5 {
		t.Fatalf("recv: %+v, %v", m, err)
	}
}

// TestTransportAdoptsAPeerThatDialledBeforeItWasAdded: nodes add each
// other one after the other, so a peer may dial in before this node has
// added it; its connection waits and is adopted, not refused.
func TestTransportAdoptsAPeerThatDialledBeforeItWasAdded(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ts := map[string]*TCPTransport{}
	for _, id := range []string{"a", "b"} {
		tr, err := NewTCPTransport("127.0.0.1:0", testConfig(id, logs))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[id] = tr
	}
	if err := ts["a"].AddPeer("b", ts["b"].Addr().String()); err != nil { // a dials b at once
		t.Fatal(err)
	}
	ctx := testContext(t)
	if _, err := ts["a"].PeerConn(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := ts["b"].AddPeer("a", ""); err != nil {
		t.Fatal(err)
	}
	if err := ts["a"].Send(ctx, "b", 1, &Message{Type: MsgAck}); err != nil {
		t.Fatalf("send on the first connection: %v", err)
	}
	if _, err := ts["b"].Recv(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "not a peer") {
		t.Errorf("the early connection was refused: %s", logs.String())
	}
}
