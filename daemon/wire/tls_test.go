package wire

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/wire/pki"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testPKI is a cluster CA with certificates for loopback machines.
type testPKI struct {
	dir string
	ca  pki.Pair
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("test cluster", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: t.TempDir(), ca: ca}
	if err := os.WriteFile(filepath.Join(p.dir, "ca.pem"), ca.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// config loads a certificate issued to name at now for validity.
func (p *testPKI) config(t *testing.T, name string, now time.Time, validity time.Duration) *tls.Config {
	t.Helper()
	pair, err := pki.Issue(p.ca, name, []string{"127.0.0.1", "localhost"}, now, validity)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.Write(pair, p.dir, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadTLS(cert, key, filepath.Join(p.dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func tlsConfig(id string, logs *logSink, cfg *tls.Config) Config {
	c := testConfig(id, logs)
	c.Secret, c.TLS = nil, cfg
	return c
}

func TestTLSCarriesFramesBetweenCertifiedPeers(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	p := newTestPKI(t)
	srv := startEcho(t, tlsConfig("server", logs, p.config(t, "server", time.Now(), time.Hour)))
	client := tlsConfig("client", logs, p.config(t, "client", time.Now(), time.Hour))
	echoOK(t, srv.addr(), client)

	c, err := Dial(testContext(t), srv.addr(), client, "server")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		t.Fatalf("connection is %T, want *tls.Conn", c.nc)
	}
	if v := tc.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("TLS version %x, want 1.3", v)
	}
}

func TestTLSRefusesStrangers(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	p := newTestPKI(t)
	srvCfg := tlsConfig("server", logs, p.config(t, "server", time.Now(), time.Hour))
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srvCfg.Metrics = metrics
	srv := startEcho(t, srvCfg)
	other := newTestPKI(t)
	cases := map[string]Config{
		"a certificate of another CA": tlsConfig("intruder", logs, other.config(t, "intruder", time.Now(), time.Hour)),
		"an expired certificate":      tlsConfig("old", logs, p.config(t, "old", time.Now().Add(-3*time.Hour), time.Hour)),
		"a plain-TCP HMAC client":     testConfig("hmac", logs),
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			if c, err := Dial(testContext(t), srv.addr(), cfg, ""); err == nil {
				c.Close()
				t.Fatal("dial succeeded")
			}
		})
	}
	logs.waitFor(t, "rejected peer", "tls handshake failed")
	// The HMAC client knocks twice: a listener that hangs up on its hello
	// may be one that predates the hello's features (Dial's fallback).
	want := float64(len(cases) + 1)
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(metrics.handshakeFailures.WithLabelValues(RejectTLS)) < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := testutil.ToFloat64(metrics.handshakeFailures.WithLabelValues(RejectTLS)); n != want {
		t.Errorf("%v handshake failures counted as tls, want %v", n, want)
	}
	echoOK(t, srv.addr(), tlsConfig("client", logs, p.config(t, "client", time.Now(), time.Hour)))
}

func TestTLSClientRefusesServerOfAnotherCA(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	other := newTestPKI(t)
	srv := startEcho(t, tlsConfig("server", logs, other.config(t, "server", time.Now(), time.Hour)))
	p := newTestPKI(t)
	c, err := Dial(testContext(t), srv.addr(), tlsConfig("client", logs, p.config(t, "client", time.Now(), time.Hour)), "")
	if err == nil {
		c.Close()
		t.Fatal("a client trusted a server certified by another CA")
	}
}

func TestLoadTLSRefusesReadableKeyAndMissingParts(t *testing.T) {
	p := newTestPKI(t)
	p.config(t, "n1", time.Now(), time.Hour)
	cert, key, ca := filepath.Join(p.dir, "n1.pem"), filepath.Join(p.dir, "n1-key.pem"), filepath.Join(p.dir, "ca.pem")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTLS(cert, key, ca); err == nil {
		t.Error("a world-readable key was accepted")
	}
	if _, err := LoadTLS(cert, "", ca); err == nil {
		t.Error("a missing key was accepted")
	}
	if _, err := LoadTLS(cert, key, cert+"-absent"); err == nil {
		t.Error("a missing CA was accepted")
	}
}

func TestConfigRefusesPlainWithTLS(t *testing.T) {
	p := newTestPKI(t)
	c := tlsConfig("n", &logSink{}, p.config(t, "n", time.Now(), time.Hour))
	c.Plain = true
	if _, err := c.withDefaults(); err == nil {
		t.Fatal("plain mode with TLS accepted")
	}
}
