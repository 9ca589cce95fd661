package wire

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
)

// Same-host connections. A listener bound to a TCP address also listens on
// a Unix socket in Linux's abstract namespace named after that address (its
// twin), and Dial to an address of this host (loopback, or an IP of one of
// its interfaces) tries the twin first, falling back to TCP when it is not
// there. Only the byte stream changes: the peers authenticate over the twin
// exactly as over TCP (HMAC or TLS, with the TCP address as TLS's server
// name), so a process that took a twin's name without the cluster's
// secret or certificate is refused, and a listener whose twin name is
// taken fails as if its port were. Why: on
// loopback each byte crosses the TCP stack twice; a 256 KiB exchange took
// 180-210 µs over TCP and 60-110 µs over a Unix socket on the 2-core VM, and
// co-located nodes (several GPUs of one server, a PS shard beside its
// workers, `heterps run` on one machine) move every dense reduction and row
// through it. Abstract names belong to the network namespace, as the TCP
// port does, and vanish with the process, so a killed daemon leaves no
// stale socket. Config.TCPOnly turns twins off on both sides.

// twinName is the abstract Unix socket name of the TCP address addr
// (host:port as the listener reports it), or "" where there are none.
func twinName(addr string) string {
	if runtime.GOOS != "linux" {
		return ""
	}
	return "@heterps-wire/" + addr
}

// listenTwin binds the twin of the TCP listener ln. There is none (nil, no
// error) when not on Linux, with TCPOnly, or for a wildcard address, which
// names no address a peer dials. A twin name another process holds is an
// error, as a taken port is: local peers would reach that process instead.
func listenTwin(ln net.Listener, cfg *Config) (net.Listener, error) {
	tcp, ok := ln.Addr().(*net.TCPAddr)
	name := twinName(ln.Addr().String())
	if cfg.TCPOnly || !ok || tcp.IP.IsUnspecified() || name == "" {
		return nil, nil
	}
	twin, err := net.Listen("unix", name)
	if err != nil {
		return nil, fmt.Errorf("wire: listen: same-host socket of %s (another process holds it; tcp_only = true does without): %w", ln.Addr(), err)
	}
	return twin, nil
}

// dialTwin connects to the twin of addr when addr is this host's, or
// returns nil.
func dialTwin(ctx context.Context, addr string, cfg *Config) net.Conn {
	name := twinName(addr)
	if cfg.TCPOnly || name == "" || !onThisHost(addr) {
		return nil
	}
	d := net.Dialer{Timeout: cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "unix", name)
	if err != nil {
		return nil
	}
	return nc
}

// onThisHost reports whether addr's host is a loopback IP or an IP of one
// of this machine's interfaces. Host names are not resolved: TCP serves
// them.
func onThisHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	ifaces, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(ifaces, func(a net.Addr) bool {
		n, ok := a.(*net.IPNet)
		return ok && n.IP.Equal(ip)
	})
}

// isLocalSocket reports whether a is a Unix socket address (a twin's end).
func isLocalSocket(a net.Addr) bool {
	_, ok := a.(*net.UnixAddr)
	return ok
}

// remoteOf names nc's remote end for logs: a Unix socket's peer has no
// address.
func remoteOf(nc net.Conn) string {
	if isLocalSocket(nc.RemoteAddr()) {
		return "same-host socket"
	}
	return nc.RemoteAddr().String()
}
