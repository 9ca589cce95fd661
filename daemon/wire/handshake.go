package wire

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// Handshake, run on every new connection before any other frame is parsed.
// D is the dialer, L the listener; all frames are on stream 0.
//
//	D -> L  MsgHello  {role D, mode, id_D, nonce_D}
//	L -> D  MsgHello  {role L, mode, id_L, nonce_L}
//	D -> L  MsgProof  HMAC-SHA256(secret, transcript(role D))   HMAC mode only
//	L -> D  MsgProof  HMAC-SHA256(secret, transcript(role L))   after D's checks out
//
//	transcript(role) = "heterps/wire/v1 handshake" || role || mode ||
//	                   len(id_D) || id_D || len(id_L) || id_L || nonce_D || nonce_L
//
// Each side proves it holds the secret over both fresh nonces, both node ids
// and its own role, so a proof can be neither replayed on another connection
// nor reflected back. L proves itself only after D has, so a peer without the
// secret gets no proof out of L at all. Handshake frames may carry at most
// maxHandshakePayload bytes and the whole exchange has HandshakeTimeout; L
// waits at most HelloTimeout for D's hello, which D sends as soon as it has
// connected, so idle sockets are dropped early (see also pendingHandshakes).
//
// Hello payload:
//
//	offset  size  field
//	     0     1  role: 1 = dialer, 2 = listener
//	     1     1  mode: 1 = HMAC-SHA256, 2 = plain, 3 = inside TLS
//	     2     1  node id length n, 1..64
//	     3     1  features: bit 0 = payload checksums are redundant here
//	     4    32  nonce
//	    36     n  node id
//
// Proof payload: the 32-byte HMAC.
//
// Features. Each end sets featureUnchecked when it finds payload checksums
// redundant on the connection (checksumRedundant: TLS, or a same-host
// socket), and data frames after the handshake go without them (CRC field
// 0, not checked) only when both did. The proofs do not cover the
// features, and need not: an end skips checksums only where it judged them
// redundant itself, and a peer that leaves the bit clear keeps them on. A
// version without features refuses a hello that sets one (it was a
// reserved byte), so L sets none D did not, and Dial asks again without
// features when L hangs up on its hello (errHelloRefused): nodes of both
// versions still talk, with checksums.

const (
	roleDialer   byte = 1
	roleListener byte = 2
	modeHMAC     byte = 1
	modePlain    byte = 2
	modeTLS      byte = 3 // inside mutual TLS: the certificates authenticated both ends

	nonceSize           = 32
	helloFixed          = 4 + nonceSize
	maxHandshakePayload = helloFixed + maxNodeID
	macDomain           = "heterps/wire/v1 handshake"

	featureUnchecked byte = 1 // payload checksums are redundant on this connection
	knownFeatures         = featureUnchecked | featureShared
)

type hello struct {
	role, mode, features byte
	node                 string
	nonce                [nonceSize]byte
}

func (h *hello) marshal() []byte {
	b := make([]byte, 0, helloFixed+len(h.node))
	b = append(b, h.role, h.mode, byte(len(h.node)), h.features)
	b = append(b, h.nonce[:]...)
	return append(b, h.node...)
}

func parseHello(b []byte) (hello, error) {
	const part = "handshake hello"
	if len(b) < helloFixed {
		return hello{}, decodeErr(part, ErrTruncated, "got %d bytes, need at least %d", len(b), helloFixed)
	}
	h := hello{role: b[0], mode: b[1]}
	if h.role != roleDialer && h.role != roleListener {
		return hello{}, decodeErr(part, ErrMalformed, "unknown role %d", h.role)
	}
	if h.mode != modeHMAC && h.mode != modePlain && h.mode != modeTLS {
		return hello{}, decodeErr(part, ErrMalformed, "unknown mode %d", h.mode)
	}
	if unknown := b[3] &^ knownFeatures; unknown != 0 {
		return hello{}, decodeErr(part, ErrMalformed, "unknown feature bits %#02x (a newer version's?)", unknown)
	}
	h.features = b[3]
	if n := int(b[2]); len(b) != helloFixed+n {
		return hello{}, decodeErr(part, ErrMalformed, "node id length %d but %d bytes follow the nonce", n, len(b)-helloFixed)
	}
	copy(h.nonce[:], b[4:helloFixed])
	h.node = string(b[helloFixed:])
	if err := checkNodeID(h.node); err != nil {
		return hello{}, decodeErr(part, ErrMalformed, "%v", err)
	}
	return h, nil
}

func modeName(m byte) string {
	switch m {
	case modePlain:
		return "plain"
	case modeTLS:
		return "TLS"
	}
	return "HMAC"
}

// proof is one side's HMAC over the handshake transcript.
func proof(secret []byte, role byte, d, l *hello) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(macDomain))
	mac.Write([]byte{role, d.mode, byte(len(d.node))})
	mac.Write([]byte(d.node))
	mac.Write([]byte{byte(len(l.node))})
	mac.Write([]byte(l.node))
	mac.Write(d.nonce[:])
	mac.Write(l.nonce[:])
	return mac.Sum(nil)
}

// framer reads and writes whole frames on a connection and numbers them.
// It reads from r: the bare connection during the handshake, so that no byte
// past it is consumed, and a buffered reader afterwards. unchecked: the
// handshake agreed that data frames carry no payload checksum (features);
// handshake and control frames always do.
type framer struct {
	nc               net.Conn
	r                io.Reader
	sendSeq, recvSeq uint64
	unchecked        bool
	shareAgreed      bool       // both ends offered shared memory (shared.go)
	shared           *sharedMem // nil unless both then sent a ring
}

// writeSmall writes a small frame in one write. The caller owns writing.
func (f *framer) writeSmall(typ MsgType, payload []byte) error {
	f.sendSeq++
	frame := AppendFrame(make([]byte, 0, HeaderSize+len(payload)), Header{Type: typ, Seq: f.sendSeq}, payload)
	if _, err := f.nc.Write(frame); err != nil {
		return fmt.Errorf("write %s: %w", typ, err)
	}
	return nil
}

// readHeader reads the next frame header and checks its sequence number.
func (f *framer) readHeader(maxPayload int) (Header, error) {
	h, err := ReadHeader(f.r, maxPayload)
	if err != nil {
		return Header{}, err
	}
	if h.Seq != f.recvSeq+1 {
		return Header{}, decodeErr("frame header", ErrMalformed, "sequence number %d, want %d", h.Seq, f.recvSeq+1)
	}
	if h.Flags&flagShared != 0 && (f.shared == nil || h.Type < MsgData || h.Length != sharedDescSize) {
		return Header{}, decodeErr("frame header", ErrFlags, "shared frame (%s, %d bytes) where no ring was shared or it cannot be one", h.Type, h.Length)
	}
	f.recvSeq = h.Seq
	return h, nil
}

// readHandshake reads one handshake frame of type want.
func (f *framer) readHandshake(want MsgType) ([]byte, error) {
	h, err := f.readHeader(maxHandshakePayload)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", want, err)
	}
	if h.Type != want || h.Stream != 0 {
		return nil, decodeErr("handshake", ErrMalformed, "got type %d on stream %d, want %s on stream 0", h.Type, h.Stream, want)
	}
	payload, err := ReadPayload(f.r, h)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", want, err)
	}
	return payload, nil
}

// handshake authenticates nc as role (roleDialer or roleListener). A dialer
// may insist on the peer's node id (wantPeer != ""). It returns the peer's
// node id and the framer to continue with.
func handshake(ctx context.Context, nc net.Conn, cfg *Config, role byte, wantPeer string) (string, *framer, error) {
	if cfg.Plain {
		if err := checkLoopback(nc.LocalAddr(), nc.RemoteAddr()); err != nil {
			return "", nil, err
		}
	}
	deadline := time.Now().Add(cfg.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	first := deadline // until the first frame
	if hello := time.Now().Add(cfg.HelloTimeout); role == roleListener && hello.Before(first) {
		first = hello
	}
	if err := nc.SetDeadline(first); err != nil {
		return "", nil, fmt.Errorf("wire: handshake: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	f := &framer{nc: nc, r: nc}
	var peer string
	var err error
	if role == roleDialer {
		peer, err = dialerHandshake(f, cfg, wantPeer)
	} else {
		peer, err = listenerHandshake(ctx, f, cfg, deadline)
	}
	if err == nil && f.shareAgreed {
		f.shared, err = f.exchangeShared(cfg)
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		f.closeShared()
		return "", nil, fmt.Errorf("wire: handshake with %s: %w", remoteOf(nc), err)
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return "", nil, fmt.Errorf("wire: handshake: %w", err)
	}
	return peer, f, nil
}

func newHello(cfg *Config, role byte, nc net.Conn) hello {
	h := hello{role: role, mode: modeHMAC, node: cfg.NodeID}
	switch {
	case cfg.Plain:
		h.mode = modePlain
	case cfg.TLS != nil:
		h.mode = modeTLS
	}
	if !cfg.noFeatures && checksumRedundant(h.mode, nc) {
		h.features |= featureUnchecked
	}
	if !cfg.noFeatures && offersShared(cfg, nc) {
		h.features |= featureShared
	}
	rand.Read(h.nonce[:])
	return h
}

// checksumRedundant reports whether payload checksums would catch nothing
// on nc: TLS authenticates every record, and a same-host Unix socket (a
// twin, local.go) never leaves this host's memory. Loopback TCP keeps them:
// a forwarder or proxy listening on loopback may carry the bytes across a
// network. Where they are redundant they cost a pass over every payload at
// each end, on the critical path of every reduction (CRC32C took 3-4 % of
// the CPU of a 4-node job on the 2-core VM).
func checksumRedundant(mode byte, nc net.Conn) bool {
	return mode == modeTLS || isLocalSocket(nc.LocalAddr())
}

// agree sets what the two hellos agreed on for the frames that follow.
func (f *framer) agree(d, l *hello) {
	f.unchecked = d.features&l.features&featureUnchecked != 0
	f.shareAgreed = d.features&l.features&featureShared != 0
}

func dialerHandshake(f *framer, cfg *Config, wantPeer string) (string, error) {
	d := newHello(cfg, roleDialer, f.nc)
	if err := f.writeSmall(MsgHello, d.marshal()); err != nil {
		return "", err
	}
	l, err := readHello(f, roleListener, cfg)
	if err != nil && d.features != 0 && hungUp(err) {
		return "", fmt.Errorf("%w: %w", errHelloRefused, err)
	}
	if err != nil {
		return "", err
	}
	if l.mode != d.mode {
		return "", fmt.Errorf("%w (%w): listener %q uses %s mode, this node %s", ErrAuth, errModeMismatch, l.node, modeName(l.mode), modeName(d.mode))
	}
	if wantPeer != "" && l.node != wantPeer {
		return "", fmt.Errorf("%w: dialled %q but the listener is %q", ErrAuth, wantPeer, l.node)
	}
	f.agree(&d, &l)
	if d.mode != modeHMAC {
		return l.node, nil
	}
	if err := f.writeSmall(MsgProof, proof(cfg.Secret, roleDialer, &d, &l)); err != nil {
		return "", err
	}
	got, err := f.readHandshake(MsgProof)
	if errors.Is(err, io.EOF) || errors.Is(err, ErrTruncated) {
		return "", fmt.Errorf("%w: listener %q hung up after our proof (different cluster secret?): %w", ErrAuth, l.node, err)
	}
	if err != nil {
		return "", err
	}
	if !hmac.Equal(got, proof(cfg.Secret, roleListener, &d, &l)) {
		return "", fmt.Errorf("%w (%w): listener %q's proof is wrong (different cluster secret?)", ErrAuth, errBadMAC, l.node)
	}
	return l.node, nil
}

// listenerHandshake runs L's side; the connection's deadline is
// HelloTimeout away until D's hello has arrived, then deadline.
func listenerHandshake(ctx context.Context, f *framer, cfg *Config, deadline time.Time) (string, error) {
	d, err := readHello(f, roleDialer, cfg)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
		return "", fmt.Errorf("no hello within the hello timeout (%s): %w", cfg.HelloTimeout, err)
	}
	if err != nil {
		return "", err
	}
	if err := f.nc.SetDeadline(deadline); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil { // cancelled before the deadline was extended: SetDeadline undid that
		return "", err
	}
	l := newHello(cfg, roleListener, f.nc)
	l.features &= d.features // a dialer of a version before features refuses a hello that sets one
	if err := f.writeSmall(MsgHello, l.marshal()); err != nil {
		return "", err
	}
	if d.mode != l.mode {
		return "", fmt.Errorf("%w (%w): dialer %q uses %s mode, this node %s", ErrAuth, errModeMismatch, d.node, modeName(d.mode), modeName(l.mode))
	}
	f.agree(&d, &l)
	if l.mode != modeHMAC {
		return d.node, nil
	}
	got, err := f.readHandshake(MsgProof)
	if err != nil {
		return "", err
	}
	if !hmac.Equal(got, proof(cfg.Secret, roleDialer, &d, &l)) {
		return "", fmt.Errorf("%w (%w): dialer %q's proof is wrong (different cluster secret?)", ErrAuth, errBadMAC, d.node)
	}
	if err := f.writeSmall(MsgProof, proof(cfg.Secret, roleListener, &d, &l)); err != nil {
		return "", err
	}
	return d.node, nil
}

// errHelloRefused: the listener hung up on a hello that set features, as
// one of a version before them does (Dial asks again without).
var errHelloRefused = errors.New("the listener hung up on this hello's features (an older version?)")

// hungUp reports whether err says the peer closed the connection.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, ErrTruncated) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func readHello(f *framer, wantRole byte, cfg *Config) (hello, error) {
	b, err := f.readHandshake(MsgHello)
	if err != nil {
		return hello{}, err
	}
	h, err := parseHello(b)
	if err != nil {
		return hello{}, err
	}
	if h.role != wantRole {
		return hello{}, decodeErr("handshake hello", ErrMalformed, "peer claims role %d, want %d", h.role, wantRole)
	}
	if cfg.refuseFeatures && h.features != 0 {
		return hello{}, decodeErr("handshake hello", ErrMalformed, "reserved byte is %d", h.features)
	}
	return h, nil
}

// checkLoopback refuses plain mode unless every address is loopback (or a
// same-host Unix socket's).
func checkLoopback(addrs ...net.Addr) error {
	for _, a := range addrs {
		if isLocalSocket(a) {
			continue
		}
		tcp, ok := a.(*net.TCPAddr)
		if !ok || !tcp.IP.IsLoopback() {
			return fmt.Errorf("%w: %v is not loopback", ErrPlainNotLoopback, a)
		}
	}
	return nil
}

// checkLoopbackHost refuses plain mode for a host:port whose host is not a
// loopback IP or "localhost", before anything is dialled or bound.
func checkLoopbackHost(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("wire: address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: %q is not a loopback address", ErrPlainNotLoopback, addr)
	}
	return nil
}
