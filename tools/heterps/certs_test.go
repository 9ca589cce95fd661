package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/heterps/heterps/daemon/wire"
)

func TestCertsInitIssueMakesLoadableMutualTLS(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if code := runCerts([]string{"init", "--dir", dir}, &out, &errs); code != exitOK {
		t.Fatalf("init: exit %d: %s", code, errs.String())
	}
	if code := runCerts([]string{"issue", "node1", "--host", "127.0.0.1,node1.example", "--dir", dir}, &out, &errs); code != exitOK {
		t.Fatalf("issue: exit %d: %s", code, errs.String())
	}
	for _, k := range []string{"ca-key.pem", "node1-key.pem"} {
		info, err := os.Stat(filepath.Join(dir, k))
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %v, want 0600", k, perm)
		}
	}
	if _, err := wire.LoadTLS(filepath.Join(dir, "node1.pem"), filepath.Join(dir, "node1-key.pem"), filepath.Join(dir, "ca.pem")); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "node1.pem"))
	b, _ := pem.Decode(raw)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.IPAddresses) != 1 || len(cert.DNSNames) != 1 || cert.DNSNames[0] != "node1.example" {
		t.Errorf("certificate SANs: %v %v", cert.IPAddresses, cert.DNSNames)
	}
	if cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key algorithm %v, want ECDSA", cert.PublicKeyAlgorithm)
	}
}

func TestCertsRefusesBadUse(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if code := runCerts([]string{"issue", "n", "--host", "h", "--dir", dir}, &out, &errs); code != exitUsage {
		t.Errorf("issue before init: exit %d, want %d", code, exitUsage)
	}
	runCerts([]string{"init", "--dir", dir}, &out, &errs)
	if code := runCerts([]string{"init", "--dir", dir}, &out, &errs); code != exitUsage {
		t.Errorf("second init overwrote the CA: exit %d", code)
	}
	for _, args := range [][]string{{"issue", "n", "--dir", dir}, {"issue", "../x", "--host", "h", "--dir", dir}, {"bogus"}} {
		errs.Reset()
		if code := runCerts(args, &out, &errs); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// TestClientFlagsTakeTLS: --tls-cert/--tls-key/--tls-ca make the CLI's
// coordinator client present its certificate; a partial set is refused.
func TestClientFlagsTakeTLS(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	runCerts([]string{"init", "--dir", dir}, &out, &errs)
	runCerts([]string{"issue", "cli", "--host", "127.0.0.1", "--dir", dir}, &out, &errs)
	f := coordFlags{url: "127.0.0.1:7070", tlsCert: filepath.Join(dir, "cli.pem"), tlsKey: filepath.Join(dir, "cli-key.pem"), tlsCA: filepath.Join(dir, "ca.pem")}
	c, err := f.client()
	if err != nil {
		t.Fatal(err)
	}
	if c.Base != "https://127.0.0.1:7070" {
		t.Errorf("base %q: host:port with a certificate means https", c.Base)
	}
	cfg := c.HTTP.Transport.(*http.Transport).TLSClientConfig
	if cfg == nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("TLS client config %+v, want the certificate and the CA", cfg)
	}
	f.tlsKey = ""
	if _, err := f.client(); err == nil {
		t.Error("a certificate without its key was accepted")
	}
}
