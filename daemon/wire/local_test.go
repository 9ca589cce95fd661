package wire

import (
	"net"
	"strings"
	"testing"
)

// A dial to a loopback listener goes over its same-host socket, in HMAC and
// in plain mode; a listener without one (TCPOnly) is reached over TCP.
func TestDialUsesTheSameHostSocket(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	plain := func(id string) Config { c := testConfig(id, logs); c.Plain, c.Secret = true, nil; return c }
	for name, c := range map[string]struct {
		server, client Config
		twin           bool
	}{
		"hmac":            {testConfig("server", logs), testConfig("client", logs), true},
		"plain":           {plain("server"), plain("client"), true},
		"server tcp only": {func() Config { c := testConfig("server", logs); c.TCPOnly = true; return c }(), testConfig("client", logs), false},
		"client tcp only": {testConfig("server", logs), func() Config { c := testConfig("client", logs); c.TCPOnly = true; return c }(), false},
	} {
		t.Run(name, func(t *testing.T) {
			srv := startEcho(t, c.server)
			echoOK(t, srv.addr(), c.client)
			conn, err := Dial(testContext(t), srv.addr(), c.client, "")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if got := isLocalSocket(conn.RemoteAddr()); got != c.twin {
				t.Fatalf("connected to %v: same-host socket %t, want %t", conn.RemoteAddr(), got, c.twin)
			}
		})
	}
}

// A listener whose same-host socket name another process holds fails, as
// a taken port does, naming the address; once the holder is gone the name
// is free again.
func TestListenRefusesATakenSameHostSocket(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	squatter, err := net.Listen("unix", twinName(addr))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Listen(addr, testConfig("server", &logSink{}))
	if err == nil || !strings.Contains(err.Error(), "same-host socket of "+addr) {
		t.Fatalf("Listen with the twin taken: %v, want an error naming it", err)
	}
	squatter.Close()
	ln, err := Listen(addr, testConfig("server", &logSink{}))
	if err != nil {
		t.Fatalf("Listen after the holder closed: %v", err)
	}
	ln.Close()
}

func TestOnThisHost(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7100": true, "[::1]:7100": true, "127.0.0.2:1": true,
		"localhost:7100": false, "192.0.2.1:7100": false, "not an address": false,
	} {
		if got := onThisHost(addr); got != want {
			t.Errorf("onThisHost(%q) = %t, want %t", addr, got, want)
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			if addr := net.JoinHostPort(n.IP.String(), "1"); !onThisHost(addr) {
				t.Errorf("onThisHost(%q) = false for an interface's address", addr)
			}
		}
	}
}
