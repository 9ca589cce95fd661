package wire

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// Config is what a node needs to speak the wire protocol. Zero durations and
// sizes take the defaults below.
type Config struct {
	// NodeID names this node to its peers: 1..64 printable ASCII bytes, no
	// spaces.
	NodeID string
	// Secret is the cluster secret (see LoadSecret). Required unless Plain.
	Secret []byte
	// Plain turns authentication off. It is refused unless both ends of
	// every connection are loopback addresses.
	Plain bool
	// TLS, if set, runs every connection in mutual TLS 1.3 (LoadTLS); the
	// certificates then authenticate the peers and Secret is not needed.
	TLS *tls.Config
	// TCPOnly keeps connections between processes on one host on TCP:
	// no listener twin, no dialling one (local.go).
	TCPOnly bool
	// NoSharedMemory keeps payloads between processes on one host in the
	// socket instead of a shared ring (shared.go).
	NoSharedMemory bool
	// SharedRing is the size in bytes of the ring this end writes large
	// payloads into when it shares memory with a peer. Default 8 MiB;
	// 1 MiB..256 MiB. Its pages are taken as the ring is first used.
	SharedRing int

	// MaxPayload bounds a frame's payload; default and ceiling HardMaxPayload.
	MaxPayload int
	// HandshakeTimeout bounds the whole handshake. Default 5s.
	HandshakeTimeout time.Duration
	// HelloTimeout bounds how long a listener waits for a new connection's
	// first frame (the dialer's hello, sent as soon as it has connected),
	// so that idle sockets are dropped well before HandshakeTimeout.
	// Default 3s; HandshakeTimeout if that is shorter.
	HelloTimeout time.Duration
	// ReadTimeout bounds the arrival of a frame's payload once its header
	// has arrived, and how long a full stream queue may hold up the reader.
	// Default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one frame. Default 30s.
	WriteTimeout time.Duration
	// IdleTimeout closes a connection on which nothing arrived for this
	// long; each side pings after a third of it without writing, so every
	// node of a cluster should use the same value. Default 60s.
	IdleTimeout time.Duration
	// DialTimeout bounds a TCP dial, and how long Transport.Send and Recv
	// wait for a connection to a peer to come up. Default 5s.
	DialTimeout time.Duration
	// QueueDepth is how many received messages each stream buffers.
	// Default 64.
	QueueDepth int
	// QueueBytes bounds the payload bytes a connection holds in its stream
	// queues; a single larger message is still taken when nothing else is
	// queued. Default 64 MiB.
	QueueBytes int
	// MaxStreams is how many streams a connection may have. Default 1024.
	MaxStreams int
	// Logger receives handshake failures and connection closes. Default
	// slog.Default().
	Logger *slog.Logger
	// Metrics, if set, counts traffic and rejected handshakes (metrics.go).
	Metrics *Metrics

	// noFeatures offers none of the handshake's features (payload
	// checksums stay on where they are redundant, no shared memory), as a
	// peer that predates them does (a Dial that such a listener hung up
	// on, and tests).
	noFeatures bool
	// refuseFeatures refuses a peer's hello that sets features, as a
	// version that predates them does (tests of mixed versions).
	refuseFeatures bool
}

// MinSecretLen is the shortest cluster secret accepted, in bytes.
const MinSecretLen = 16

const maxNodeID = 64

// withDefaults validates c and fills in defaults.
func (c Config) withDefaults() (Config, error) {
	if err := checkNodeID(c.NodeID); err != nil {
		return c, err
	}
	if c.Plain && c.TLS != nil {
		return c, errors.New("wire: config: plain mode and TLS exclude each other")
	}
	if !c.Plain && c.TLS == nil && len(c.Secret) < MinSecretLen {
		return c, fmt.Errorf("wire: config: cluster secret is %d bytes, need at least %d (or plain mode on loopback)", len(c.Secret), MinSecretLen)
	}
	if c.MaxPayload < 0 || c.MaxPayload > HardMaxPayload {
		return c, fmt.Errorf("wire: config: max payload %d outside 0..%d", c.MaxPayload, HardMaxPayload)
	}
	if c.SharedRing != 0 && (c.SharedRing < minSharedRing || c.SharedRing > maxSharedRing) {
		return c, fmt.Errorf("wire: config: shared ring of %d bytes outside %d..%d", c.SharedRing, minSharedRing, maxSharedRing)
	}
	setDefault(&c.SharedRing, defaultSharedRing)
	setDefault(&c.MaxPayload, HardMaxPayload)
	setDefault(&c.HandshakeTimeout, 5*time.Second)
	setDefault(&c.HelloTimeout, 3*time.Second)
	setDefault(&c.ReadTimeout, 30*time.Second)
	setDefault(&c.WriteTimeout, 30*time.Second)
	setDefault(&c.IdleTimeout, 60*time.Second)
	setDefault(&c.DialTimeout, 5*time.Second)
	setDefault(&c.QueueDepth, 64)
	setDefault(&c.QueueBytes, 64<<20)
	setDefault(&c.MaxStreams, 1024)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func checkNodeID(id string) error {
	if len(id) == 0 || len(id) > maxNodeID {
		return fmt.Errorf("wire: node id %q must be 1..%d bytes", id, maxNodeID)
	}
	for i := range len(id) {
		if id[i] <= ' ' || id[i] > '~' {
			return fmt.Errorf("wire: node id %q: byte %d is not printable ASCII", id, i)
		}
	}
	return nil
}

// LoadSecret reads a cluster secret from path. Surrounding whitespace is
// trimmed. It refuses a file that others (outside its owner and group) may
// read or write, one larger than 4 KiB, and a secret shorter than
// MinSecretLen bytes.
func LoadSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("wire: cluster secret: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("wire: cluster secret: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("wire: cluster secret %s: not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o007 != 0 {
		return nil, fmt.Errorf("wire: cluster secret %s: mode %v lets other users read or write it; chmod o-rwx", path, perm)
	}
	const maxSecretFile = 4 << 10
	raw, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, fmt.Errorf("wire: cluster secret %s: %w", path, err)
	}
	if len(raw) > maxSecretFile {
		return nil, fmt.Errorf("wire: cluster secret %s: larger than %d bytes", path, maxSecretFile)
	}
	secret := bytes.TrimSpace(raw)
	switch {
	case len(secret) == 0:
		return nil, fmt.Errorf("wire: cluster secret %s: %w", path, errEmptySecret)
	case len(secret) < MinSecretLen:
		return nil, fmt.Errorf("wire: cluster secret %s: %d bytes, need at least %d", path, len(secret), MinSecretLen)
	}
	return secret, nil
}

var errEmptySecret = errors.New("file is empty")
