package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Frame layout, version 1. Integers are little-endian.
//
//	offset  size  field
//	     0     4  magic "HPSW" (0x48 0x50 0x53 0x57)
//	     4     1  version, 1
//	     5     1  message type (MsgType)
//	     6     2  flags: bit 0 = the payload is a position and length in
//	              the sender's shared ring (shared.go), allowed only where
//	              the handshake set one up; the rest must be 0
//	     8     4  stream id (0 = connection control, >0 = a logical stream)
//	    12     8  sequence number: 1 for the first frame a side sends on a
//	              connection (handshake included), +1 for every frame after
//	    20     4  payload length n
//	    24     4  CRC32C (Castagnoli) of the payload
//	    28     n  payload
//
// A reader validates the whole header, including n against its limit, before
// it allocates the payload.

const (
	// HeaderSize is the size of a frame header in bytes.
	HeaderSize = 28
	// Version is the frame format version this package speaks.
	Version = 1
	// HardMaxPayload caps every payload limit: the default and the most a
	// Config may allow.
	HardMaxPayload = 256 << 20
)

var (
	frameMagic = [4]byte{'H', 'P', 'S', 'W'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Header is a decoded frame header.
type Header struct {
	Type   MsgType
	Flags  uint16
	Stream uint32
	Seq    uint64
	Length uint32 // payload length in bytes
	CRC    uint32 // CRC32C of the payload
}

// PutHeader writes h into b[:HeaderSize].
func PutHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	copy(b[0:4], frameMagic[:])
	b[4] = Version
	b[5] = byte(h.Type)
	binary.LittleEndian.PutUint16(b[6:8], h.Flags)
	binary.LittleEndian.PutUint32(b[8:12], h.Stream)
	binary.LittleEndian.PutUint64(b[12:20], h.Seq)
	binary.LittleEndian.PutUint32(b[20:24], h.Length)
	binary.LittleEndian.PutUint32(b[24:28], h.CRC)
}

// ParseHeader decodes and validates a frame header: magic, version, flags,
// and a payload length of at most maxPayload.
func ParseHeader(b []byte, maxPayload int) (Header, error) {
	const part = "frame header"
	if len(b) < HeaderSize {
		return Header{}, decodeErr(part, ErrTruncated, "got %d of %d bytes", len(b), HeaderSize)
	}
	if [4]byte(b[0:4]) != frameMagic {
		return Header{}, decodeErr(part, ErrBadMagic, "got %q, want %q", b[0:4], frameMagic[:])
	}
	if b[4] != Version {
		return Header{}, decodeErr(part, ErrVersion, "got %d, want %d", b[4], Version)
	}
	h := Header{
		Type:   MsgType(b[5]),
		Flags:  binary.LittleEndian.Uint16(b[6:8]),
		Stream: binary.LittleEndian.Uint32(b[8:12]),
		Seq:    binary.LittleEndian.Uint64(b[12:20]),
		Length: binary.LittleEndian.Uint32(b[20:24]),
		CRC:    binary.LittleEndian.Uint32(b[24:28]),
	}
	if h.Flags&^flagShared != 0 {
		return Header{}, decodeErr(part, ErrFlags, "got %#04x, version 1 defines only %#04x", h.Flags, flagShared)
	}
	if uint64(h.Length) > uint64(maxPayload) {
		return Header{}, decodeErr(part, ErrTooLarge, "payload length %d, limit %d", h.Length, maxPayload)
	}
	return h, nil
}

// AppendFrame appends a whole frame to dst, filling in h.Length and h.CRC
// from payload. It is the simple path for small frames; Conn writes large
// ones without copying.
func AppendFrame(dst []byte, h Header, payload []byte) []byte {
	h.Length = uint32(len(payload))
	h.CRC = crc32.Checksum(payload, castagnoli)
	var hb [HeaderSize]byte
	PutHeader(hb[:], h)
	return append(append(dst, hb[:]...), payload...)
}

// ReadFrame reads one frame from r and checks its CRC. A reader at a frame
// boundary with nothing more to read returns io.EOF unwrapped; anything cut
// short returns a *DecodeError for ErrTruncated.
func ReadFrame(r io.Reader, maxPayload int) (Header, []byte, error) {
	h, err := ReadHeader(r, maxPayload)
	if err != nil {
		return Header{}, nil, err
	}
	payload, err := ReadPayload(r, h)
	if err != nil {
		return Header{}, nil, err
	}
	return h, payload, nil
}

// ReadHeader reads and validates one frame header from r.
func ReadHeader(r io.Reader, maxPayload int) (Header, error) {
	var b [HeaderSize]byte
	n, err := io.ReadFull(r, b[:])
	switch {
	case err == io.EOF:
		return Header{}, io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Header{}, decodeErr("frame header", ErrTruncated, "got %d of %d bytes", n, HeaderSize)
	case err != nil:
		return Header{}, fmt.Errorf("read frame header (%d of %d bytes): %w", n, HeaderSize, err)
	}
	return ParseHeader(b[:], maxPayload)
}

// ReadPayload reads the payload that h announces and checks its CRC. The
// caller has validated h.Length against its limit (ReadHeader does).
func ReadPayload(r io.Reader, h Header) ([]byte, error) {
	return readPayloadInto(r, h, make([]byte, h.Length), true)
}

// readPayloadInto is ReadPayload into payload, which has length h.Length;
// without check it ignores the CRC field. It checksums each chunk as soon
// as it has arrived, while it is in cache.
func readPayloadInto(r io.Reader, h Header, payload []byte, check bool) ([]byte, error) {
	const chunk = 128 << 10
	var crc uint32
	for off := 0; off < len(payload); {
		end := min(off+chunk, len(payload))
		n, err := io.ReadFull(r, payload[off:end])
		if check {
			crc = crc32.Update(crc, castagnoli, payload[off:off+n])
		}
		off += n
		switch {
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			return nil, decodeErr("frame payload", ErrTruncated, "got %d of %d bytes", off, h.Length)
		case err != nil:
			return nil, fmt.Errorf("read frame payload (%d of %d bytes): %w", off, h.Length, err)
		}
	}
	if check && crc != h.CRC {
		return nil, decodeErr("frame payload", ErrChecksum, "header says %#08x, payload has %#08x", h.CRC, crc)
	}
	return payload, nil
}
