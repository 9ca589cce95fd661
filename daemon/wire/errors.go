package wire

import (
	"errors"
	"fmt"
)

// Reasons a frame, tensor or message fails to decode. A *DecodeError wraps
// exactly one of them, so callers test with errors.Is.
var (
	ErrBadMagic  = errors.New("bad magic")
	ErrVersion   = errors.New("unsupported version")
	ErrFlags     = errors.New("unsupported flags")
	ErrTooLarge  = errors.New("length over limit")
	ErrChecksum  = errors.New("CRC32C mismatch")
	ErrTruncated = errors.New("short read")
	ErrMalformed = errors.New("malformed")
)

// Connection-level errors.
var (
	// ErrClosed is wrapped by every error that reports a closed connection or
	// transport; the reason it closed is wrapped beside it.
	ErrClosed = errors.New("wire: connection closed")
	// ErrPeerClosed is the reason when the peer said goodbye.
	ErrPeerClosed = errors.New("peer closed the connection")
	// ErrAuth is wrapped by every handshake failure that concerns identity:
	// a wrong proof, a mode mismatch or an unexpected node id.
	ErrAuth = errors.New("wire: authentication failed")
	// ErrPlainNotLoopback refuses unauthenticated mode off loopback.
	ErrPlainNotLoopback = errors.New("wire: plain (unauthenticated) mode is allowed only between loopback addresses")
	// ErrUnknownPeer is returned for a node id the transport doesn't know.
	ErrUnknownPeer = errors.New("wire: unknown peer")
)

// DecodeError reports bytes that could not be decoded: which part (e.g.
// "frame header", "tensor 2"), why (one of the Err* reasons) and the values
// involved.
type DecodeError struct {
	Part   string
	Reason error
	Detail string
}

func (e *DecodeError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("wire: %s: %v", e.Part, e.Reason)
	}
	return fmt.Sprintf("wire: %s: %v: %s", e.Part, e.Reason, e.Detail)
}

func (e *DecodeError) Unwrap() error { return e.Reason }

func decodeErr(part string, reason error, format string, args ...any) error {
	return &DecodeError{Part: part, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
