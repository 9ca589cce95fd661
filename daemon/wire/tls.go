package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// Mutual TLS. With Config.TLS set, every connection is TLS 1.3 with a
// certificate on both ends, each verified against the cluster CA; the
// hello exchange (node ids) then runs inside TLS in "tls" mode, without
// the HMAC proofs, which the certificates replace. Any holder of a
// certificate signed by the cluster CA is a member of the cluster, as any
// holder of the secret is in HMAC mode; frames are encrypted and
// integrity-protected by TLS.

// LoadTLS reads a machine's certificate and key and the cluster CA (PEM
// files, as `heterps certs` writes them) into a mutual-TLS configuration
// usable both to serve and to dial. It refuses a key file that other
// users may read, as LoadSecret does.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, fmt.Errorf("tls: need a certificate, its key and the cluster CA (got cert %q, key %q, ca %q)", certFile, keyFile, caFile)
	}
	if err := checkPrivate(keyFile); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %s, %s: %w", certFile, keyFile, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tls: cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls: cluster CA %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

func checkPrivate(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("tls: key: %w", err)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("tls: key %s: not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o007 != 0 {
		return fmt.Errorf("tls: key %s: mode %v lets other users read or write it; chmod o-rwx", path, perm)
	}
	return nil
}

// clientTLS returns cfg set to verify the server at addr (host:port) by
// its host name or IP address.
func clientTLS(cfg *tls.Config, addr string) *tls.Config {
	c := cfg.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		c.ServerName = host
	}
	return c
}

// errTLS marks a failed TLS handshake.
var errTLS = errors.New("tls handshake failed")

// tlsClient runs the client side of a TLS handshake on nc within ctx.
func tlsClient(ctx context.Context, nc net.Conn, cfg *Config, addr string) (net.Conn, error) {
	tc := tls.Client(nc, clientTLS(cfg.TLS, addr))
	ctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("wire: %w with %s: %w", errTLS, addr, err)
	}
	return tc, nil
}

// tlsServer runs the server side of a TLS handshake on nc within the hello
// timeout: a peer that cannot present a certificate of the cluster CA in
// that time is dropped.
func tlsServer(ctx context.Context, nc net.Conn, cfg *Config) (net.Conn, error) {
	tc := tls.Server(nc, cfg.TLS)
	ctx, cancel := context.WithTimeout(ctx, min(cfg.HelloTimeout, cfg.HandshakeTimeout))
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("wire: %w with %s: %w", errTLS, remoteOf(nc), err)
	}
	return tc, nil
}
