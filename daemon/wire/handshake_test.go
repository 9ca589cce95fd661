package wire

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
)

func TestHandshakeAuthenticatesBothSides(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	ln, err := Listen("127.0.0.1:0", testConfig("server", logs))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := testContext(t)
	client, err := Dial(ctx, ln.Addr().String(), testConfig("client", logs), "server")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if client.Peer() != "server" || server.Peer() != "client" {
		t.Errorf("peers: client sees %q, server sees %q", client.Peer(), server.Peer())
	}
}

func TestHandshakeRefusesWrongSecret(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	srv := startEcho(t, testConfig("server", logs))
	bad := testConfig("intruder", logs)
	bad.Secret = []byte("some-other-secret-0123456789")
	_, err := Dial(testContext(t), srv.addr(), bad, "")
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("dial with a wrong secret: %v, want ErrAuth", err)
	}
	logs.waitFor(t, "rejected peer", "intruder", "proof is wrong")
	echoOK(t, srv.addr(), testConfig("client", logs))
}

func TestHandshakeRefusesUnexpectedPeer(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	srv := startEcho(t, testConfig("server", logs))
	_, err := Dial(testContext(t), srv.addr(), testConfig("client", logs), "someone-else")
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("err = %v, want ErrAuth", err)
	}
	echoOK(t, srv.addr(), testConfig("client", logs))
}

func TestHandshakeRefusesModeMismatch(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	srv := startEcho(t, testConfig("server", logs))
	plain := testConfig("client", logs)
	plain.Plain, plain.Secret = true, nil
	_, err := Dial(testContext(t), srv.addr(), plain, "")
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("plain client against an HMAC server: %v, want ErrAuth", err)
	}
	logs.waitFor(t, "rejected peer", "plain mode")
}

func TestPlainModeOnLoopback(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	cfg := func(id string) Config {
		c := testConfig(id, logs)
		c.Plain, c.Secret = true, nil
		return c
	}
	srv := startEcho(t, cfg("server"))
	echoOK(t, srv.addr(), cfg("client"))
	// "localhost" is loopback too.
	_, port, _ := net.SplitHostPort(srv.addr())
	echoOK(t, net.JoinHostPort("localhost", port), cfg("client"))
}

func TestPlainModeRefusedOffLoopback(t *testing.T) {
	checkLeaks(t)
	cfg := testConfig("n", &logSink{})
	cfg.Plain, cfg.Secret = true, nil
	if _, err := Listen("0.0.0.0:0", cfg); !errors.Is(err, ErrPlainNotLoopback) {
		t.Errorf("Listen on 0.0.0.0 in plain mode: %v", err)
	}
	if _, err := Listen(":0", cfg); !errors.Is(err, ErrPlainNotLoopback) {
		t.Errorf("Listen on :0 in plain mode: %v", err)
	}
	// 192.0.2.0/24 is TEST-NET-1: refused before any packet is sent.
	if _, err := Dial(context.Background(), "192.0.2.1:9", cfg, ""); !errors.Is(err, ErrPlainNotLoopback) {
		t.Errorf("Dial to 192.0.2.1 in plain mode: %v", err)
	}
	if _, err := NewTCPTransport("10.1.2.3:0", cfg); !errors.Is(err, ErrPlainNotLoopback) {
		t.Errorf("transport on 10.1.2.3 in plain mode: %v", err)
	}
	tr, err := NewTCPTransport("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.AddPeer("z", "192.0.2.1:9"); !errors.Is(err, ErrPlainNotLoopback) {
		t.Errorf("AddPeer at 192.0.2.1 in plain mode: %v", err)
	}
	// The check on live connections, for addresses that passed by name.
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	remote := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 2}
	if err := checkLoopback(local, remote); !errors.Is(err, ErrPlainNotLoopback) {
		t.Errorf("checkLoopback(127.0.0.1, 192.0.2.1) = %v", err)
	}
	if err := checkLoopback(local, &net.TCPAddr{IP: net.IPv6loopback}); err != nil {
		t.Errorf("checkLoopback(127.0.0.1, ::1) = %v", err)
	}
}

func TestProofBindsRoleNoncesAndIDs(t *testing.T) {
	d := hello{role: roleDialer, mode: modeHMAC, node: "a", nonce: [32]byte{1}}
	l := hello{role: roleListener, mode: modeHMAC, node: "b", nonce: [32]byte{2}}
	base := proof(testSecret, roleDialer, &d, &l)
	variants := map[string][]byte{
		"other role (reflection)": proof(testSecret, roleListener, &d, &l),
		"other secret":            proof([]byte("another-secret-0123456789"), roleDialer, &d, &l),
	}
	d2 := d
	d2.nonce[0] = 9
	variants["other dialer nonce (replay)"] = proof(testSecret, roleDialer, &d2, &l)
	l2 := l
	l2.nonce[0] = 9
	variants["other listener nonce (replay)"] = proof(testSecret, roleDialer, &d, &l2)
	// Moving a byte between the two ids must change the proof.
	d3, l3 := d, l
	d3.node, l3.node = "ab", ""
	variants["shifted ids"] = proof(testSecret, roleDialer, &d3, &l3)
	for name, p := range variants {
		if bytes.Equal(p, base) {
			t.Errorf("%s gives the same proof", name)
		}
	}
}

func TestParseHelloRejects(t *testing.T) {
	good := (&hello{role: roleDialer, mode: modeHMAC, node: "node"}).marshal()
	mutate := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"short":           good[:10],
		"role":            mutate(func(b []byte) []byte { b[0] = 7; return b }),
		"mode":            mutate(func(b []byte) []byte { b[1] = 7; return b }),
		"unknown feature": mutate(func(b []byte) []byte { b[3] = 4; return b }),
		"id length":       mutate(func(b []byte) []byte { b[2] = 5; return b }),
		"empty id":        mutate(func(b []byte) []byte { b[2] = 0; return b[:helloFixed] }),
		"unprintable id":  mutate(func(b []byte) []byte { b[helloFixed] = '\n'; return b }),
	}
	for name, b := range cases {
		if _, err := parseHello(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if h, err := parseHello(good); err != nil || h.node != "node" {
		t.Errorf("good hello: %+v, %v", h, err)
	}
}
