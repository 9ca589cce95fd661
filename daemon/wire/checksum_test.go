package wire

import (
	"net"
	"testing"
	"time"
)

// addrConn is a connection that only has addresses.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }

func TestChecksumRedundantOnlyWithinTheHostOrUnderTLS(t *testing.T) {
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 7000} }
	unix := &net.UnixAddr{Name: "@heterps-7000", Net: "unix"}
	for _, c := range []struct {
		name          string
		mode          byte
		local, remote net.Addr
		want          bool
	}{
		{"loopback (a forwarder may stand behind it)", modeHMAC, tcp("127.0.0.1"), tcp("127.0.0.1"), false},
		{"plain on loopback", modePlain, tcp("::1"), tcp("::1"), false},
		{"same-host socket", modeHMAC, unix, unix, true},
		{"another host", modeHMAC, tcp("10.0.0.1"), tcp("10.0.0.2"), false},
		{"loopback under TLS", modeTLS, tcp("127.0.0.1"), tcp("127.0.0.1"), true},
		{"another host under TLS", modeTLS, tcp("10.0.0.1"), tcp("10.0.0.2"), true},
	} {
		if got := checksumRedundant(c.mode, addrConn{local: c.local, remote: c.remote}); got != c.want {
			t.Errorf("%s: redundant %t, want %t", c.name, got, c.want)
		}
	}
}

// Both ends leave payload checksums out where both find them redundant, and
// keep them where either does not.
func TestChecksumsAreLeftOutOnlyWhereBothEndsAgree(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	p := newTestPKI(t)
	tcpOnly := func(c Config) Config { c.TCPOnly = true; return c }
	keep := func(c Config) Config { c.noFeatures = true; return c }
	cases := map[string]struct {
		server, client Config
		unchecked      bool
	}{
		"same-host socket":  {testConfig("server", logs), testConfig("client", logs), true},
		"loopback tcp":      {tcpOnly(testConfig("server", logs)), tcpOnly(testConfig("client", logs)), false},
		"tls":               {tcpOnly(tlsConfig("server", logs, p.config(t, "server", time.Now(), time.Hour))), tcpOnly(tlsConfig("client", logs, p.config(t, "client", time.Now(), time.Hour))), true},
		"server keeps them": {keep(testConfig("server", logs)), testConfig("client", logs), false},
		"client keeps them": {testConfig("server", logs), keep(testConfig("client", logs)), false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			srv := startEcho(t, c.server)
			echoOK(t, srv.addr(), c.client) // frames go through either way
			srv.mu.Lock()
			server := srv.conns[len(srv.conns)-1]
			srv.mu.Unlock()
			conn, err := Dial(testContext(t), srv.addr(), c.client, "")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if conn.fr.unchecked != c.unchecked || server.fr.unchecked != c.unchecked {
				t.Fatalf("unchecked: client %t, server %t, want %t", conn.fr.unchecked, server.fr.unchecked, c.unchecked)
			}
		})
	}
}

// On a connection that agreed to leave checksums out, a data frame's CRC
// field is neither checked nor filled in.
func TestUncheckedFramesCarryNoChecksum(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	srv := startEcho(t, testConfig("server", logs))
	nc, fr := rawAuthedOn(t, "unix", twinName(srv.addr()), testConfig("raw", logs))
	if !fr.unchecked {
		t.Fatal("a same-host socket kept payload checksums")
	}
	frame := dataFrame(t, 1, fr.sendSeq+1, &Message{Type: MsgAck, Meta: Meta{Job: 77}})
	frame[24] ^= 0xff // the CRC field, which the server must not check
	nc.Write(frame)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, err := ReadHeader(nc, 1<<20)
	if err != nil {
		t.Fatalf("the server refused a frame with a wrong CRC field: %v; log:\n%s", err, logs)
	}
	payload, err := readPayloadInto(nc, h, make([]byte, h.Length), false)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(h.Type, payload, 1<<20)
	if err != nil || m.Meta.Job != 77 || h.CRC != 0 {
		t.Fatalf("echo: %+v, CRC field %#x, %v", m, h.CRC, err)
	}
}

// A listener of a version before the hello's features hangs up on a hello
// that sets one; Dial asks it again without, and the two keep checksums.
func TestDialFallsBackForAListenerWithoutFeatures(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	old := testConfig("server", logs)
	old.refuseFeatures = true
	srv := startEcho(t, old)
	echoOK(t, srv.addr(), testConfig("client", logs))
	conn, err := Dial(testContext(t), srv.addr(), testConfig("client", logs), "server")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.fr.unchecked || conn.fr.shared != nil {
		t.Errorf("a connection to a listener without features left checksums out (%v) or shares memory (%v)", conn.fr.unchecked, conn.fr.shared != nil)
	}
	logs.waitFor(t, "reserved byte is 3") // unchecked and shared memory, offered on a twin
}

// A listener answers a dialer that offers no features with none, so that a
// dialer of a version before them can read its hello.
func TestListenerOffersNoFeatureTheDialerDidNot(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	srv := startEcho(t, testConfig("server", logs))
	old := testConfig("client", logs)
	old.noFeatures, old.refuseFeatures = true, true
	nc, fr := rawAuthedOn(t, "unix", twinName(srv.addr()), old)
	if fr.unchecked {
		t.Fatal("a connection whose dialer offered no features left checksums out")
	}
	nc.Write(dataFrame(t, 1, fr.sendSeq+1, &Message{Type: MsgAck, Meta: Meta{Job: 77}}))
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := ReadFrame(nc, 1<<20); err != nil {
		t.Fatalf("echo with its CRC: %v", err)
	}
}
