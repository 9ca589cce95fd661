// Package pki makes the certificates of a heterps cluster's mutual TLS: a
// cluster certificate authority (ECDSA P-256) and, signed by it, one
// certificate per machine that serves both as a TLS server and a TLS client
// (the coordinator's HTTPS API, node daemons' data plane, the CLI). It is
// what `heterps certs` runs and what tests use to build clusters with TLS.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Pair is a certificate and its private key, PEM-encoded.
type Pair struct {
	Cert, Key []byte
}

// clockSkew backdates NotBefore so that a machine whose clock is a little
// behind accepts a certificate issued a moment ago.
const clockSkew = 5 * time.Minute

// NewCA returns a self-signed cluster CA named name, valid for validity from now.
func NewCA(name string, now time.Time, validity time.Duration) (Pair, error) {
	if name == "" || validity <= 0 {
		return Pair{}, fmt.Errorf("pki: CA needs a name and a positive validity (got %q, %s)", name, validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: CA key: %w", err)
	}
	tmpl, err := template(name, now, validity)
	if err != nil {
		return Pair{}, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.MaxPathLenZero = true, true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return encode(der, key)
}

// Issue signs a certificate for name with ca, for the given hosts (DNS
// names or IP addresses; the machine's addresses its peers dial), usable
// for both server and client authentication.
func Issue(ca Pair, name string, hosts []string, now time.Time, validity time.Duration) (Pair, error) {
	if name == "" || len(hosts) == 0 || validity <= 0 {
		return Pair{}, fmt.Errorf("pki: certificate needs a name, at least one host and a positive validity (got %q, %v, %s)", name, hosts, validity)
	}
	caCert, caKey, err := parse(ca)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: CA: %w", err)
	}
	if !caCert.IsCA {
		return Pair{}, errors.New("pki: the given CA certificate is not a CA")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: key: %w", err)
	}
	tmpl, err := template(name, now, validity)
	if err != nil {
		return Pair{}, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: certificate for %s: %w", name, err)
	}
	return encode(der, key)
}

func template(name string, now time.Time, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"heterps cluster"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(validity),
	}, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (Pair, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: key: %w", err)
	}
	return Pair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
	}, nil
}

func parse(p Pair) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(p.Cert)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	kb, _ := pem.Decode(p.Key)
	if kb == nil {
		return nil, nil, errors.New("no PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("private key is %T, want ECDSA", k)
	}
	return cert, key, nil
}

// Write stores p as dir/name.pem and dir/name-key.pem (mode 0600),
// refusing to overwrite either. It returns the two paths.
func Write(p Pair, dir, name string) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("pki: %w", err)
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{keyPath, p.Key, 0o600}, {certPath, p.Cert, 0o644}} {
		if err := writeNew(f.path, f.data, f.mode); err != nil {
			return "", "", err
		}
	}
	return certPath, keyPath, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("pki: %w (remove it first to replace it)", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}

// Read loads dir/name.pem and dir/name-key.pem.
func Read(dir, name string) (Pair, error) {
	cert, err := os.ReadFile(filepath.Join(dir, name+".pem"))
	if err != nil {
		return Pair{}, fmt.Errorf("pki: %w", err)
	}
	key, err := os.ReadFile(filepath.Join(dir, name+"-key.pem"))
	if err != nil {
		return Pair{}, fmt.Errorf("pki: %w", err)
	}
	return Pair{Cert: cert, Key: key}, nil
}
