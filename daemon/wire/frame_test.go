package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 4096, 1 << 20} {
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(i*7 + 3)
		}
		h := Header{Type: MsgActivation, Stream: 7, Seq: 1<<40 + 5}
		frame := AppendFrame(nil, h, payload)
		if len(frame) != HeaderSize+size {
			t.Fatalf("size %d: frame is %d bytes", size, len(frame))
		}
		r := bytes.NewReader(frame)
		got, gotPayload, err := ReadFrame(r, size)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if got.Type != h.Type || got.Stream != h.Stream || got.Seq != h.Seq || got.Length != uint32(size) {
			t.Errorf("size %d: header %+v, sent %+v", size, got, h)
		}
		if !bytes.Equal(gotPayload, payload) {
			t.Errorf("size %d: payload differs", size)
		}
		if _, _, err := ReadFrame(r, size); err != io.EOF {
			t.Errorf("size %d: read at end = %v, want io.EOF", size, err)
		}
	}
}

func TestFrameHeaderOffsets(t *testing.T) {
	var b [HeaderSize]byte
	PutHeader(b[:], Header{Type: 0x11, Flags: 0, Stream: 0x01020304, Seq: 0x0a0b0c0d0e0f1011, Length: 0x05060708, CRC: 0xdeadbeef})
	want := []byte{'H', 'P', 'S', 'W', 1, 0x11, 0, 0,
		0x04, 0x03, 0x02, 0x01,
		0x11, 0x10, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a,
		0x08, 0x07, 0x06, 0x05,
		0xef, 0xbe, 0xad, 0xde}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("header bytes\n got %x\nwant %x", b[:], want)
	}
}

func TestParseHeaderRejects(t *testing.T) {
	good := AppendFrame(nil, Header{Type: MsgActivation, Stream: 1, Seq: 1}, []byte("abc"))[:HeaderSize]
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	cases := []struct {
		name   string
		header []byte
		limit  int
		want   error
	}{
		{"short", good[:HeaderSize-1], 10, ErrTruncated},
		{"magic", mutate(func(b []byte) { b[0] = 'X' }), 10, ErrBadMagic},
		{"version", mutate(func(b []byte) { b[4] = 2 }), 10, ErrVersion},
		{"flags", mutate(func(b []byte) { b[7] = 1 }), 10, ErrFlags},
		{"length", good, 2, ErrTooLarge},
		{"length max uint32", mutate(func(b []byte) { binary.LittleEndian.PutUint32(b[20:], ^uint32(0)) }), HardMaxPayload, ErrTooLarge},
	}
	for _, c := range cases {
		_, err := ParseHeader(c.header, c.limit)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
		var de *DecodeError
		if !errors.As(err, &de) || de.Part != "frame header" {
			t.Errorf("%s: err %v is not a *DecodeError for the frame header", c.name, err)
		}
	}
	if _, err := ParseHeader(good, 3); err != nil {
		t.Errorf("length equal to the limit: %v", err)
	}
}

func TestReadFrameRejects(t *testing.T) {
	frame := AppendFrame(nil, Header{Type: MsgActivation, Stream: 1, Seq: 1}, []byte("hello, world"))
	corrupt := bytes.Clone(frame)
	corrupt[HeaderSize+3] ^= 1
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"truncated header", frame[:10], ErrTruncated},
		{"truncated payload", frame[:HeaderSize+4], ErrTruncated},
		{"header only", frame[:HeaderSize], ErrTruncated},
		{"crc", corrupt, ErrChecksum},
	}
	for _, c := range cases {
		_, _, err := ReadFrame(bytes.NewReader(c.in), 1<<10)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestOversizedLengthRejectedBeforeAllocating(t *testing.T) {
	var hdr [HeaderSize]byte
	PutHeader(hdr[:], Header{Type: MsgActivation, Stream: 1, Seq: 1, Length: HardMaxPayload})
	in := append(hdr[:], make([]byte, 64)...)
	r := &countingReader{r: bytes.NewReader(in)}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := ReadFrame(r, 1<<20)
	runtime.ReadMemStats(&after)

	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if r.n != HeaderSize {
		t.Errorf("read %d bytes, want only the %d-byte header", r.n, HeaderSize)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("allocated %d bytes for a rejected frame", grew)
	}
}
