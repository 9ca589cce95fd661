package wire

import (
	"bytes"
	"testing"
)

// The decoders must never panic, and whatever they accept must re-encode to
// exactly the bytes they consumed: the encodings are canonical.

const fuzzMaxPayload = 1 << 16

func FuzzFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Header{Type: MsgPing, Seq: 1}, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, payload, err := ReadFrame(bytes.NewReader(data), fuzzMaxPayload)
		if err != nil {
			return
		}
		n := HeaderSize + len(payload)
		if again := AppendFrame(nil, h, payload); !bytes.Equal(again, data[:n]) {
			t.Fatalf("re-encoded frame differs:\n got %x\nwant %x", again, data[:n])
		}
		if h.Type < MsgData {
			return
		}
		m, err := DecodeMessage(h.Type, payload, fuzzMaxPayload)
		if err != nil {
			return
		}
		again, err := AppendMessage(nil, ownedMessage(m), fuzzMaxPayload)
		if err != nil {
			t.Fatalf("decoded message does not re-encode: %v", err)
		}
		if !bytes.Equal(again, payload) {
			t.Fatalf("re-encoded message differs:\n got %x\nwant %x", again, payload)
		}
	})
}

func FuzzTensor(f *testing.F) {
	seed, _ := AppendTensor(nil, F32Tensor([]float32{1, 2}, 2), 8)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		v, rest, err := DecodeTensor(data, fuzzMaxPayload)
		if err != nil {
			return
		}
		if v.Len()*v.DType.Size() != len(v.Bytes()) {
			t.Fatalf("view of %d elements holds %d bytes", v.Len(), len(v.Bytes()))
		}
		again, err := AppendTensor(nil, v.Tensor(), fuzzMaxPayload)
		if err != nil {
			t.Fatalf("decoded tensor does not re-encode: %v", err)
		}
		if consumed := data[:len(data)-len(rest)]; !bytes.Equal(again, consumed) {
			t.Fatalf("re-encoded tensor differs:\n got %x\nwant %x", again, consumed)
		}
	})
}

// FuzzMessage takes the message type from the first byte.
func FuzzMessage(f *testing.F) {
	seed, _ := AppendMessage(nil, &Message{Type: MsgAck, Text: "ok"}, 1<<10)
	f.Add(append([]byte{byte(MsgAck)}, seed...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		m, err := DecodeMessage(MsgType(data[0]), data[1:], fuzzMaxPayload)
		if err != nil {
			return
		}
		again, err := AppendMessage(nil, ownedMessage(m), fuzzMaxPayload)
		if err != nil {
			t.Fatalf("decoded message does not re-encode: %v", err)
		}
		if !bytes.Equal(again, data[1:]) {
			t.Fatalf("re-encoded message differs:\n got %x\nwant %x", again, data[1:])
		}
	})
}

func FuzzHello(f *testing.F) {
	f.Add((&hello{role: roleDialer, mode: modeHMAC, node: "n"}).marshal())
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := parseHello(data)
		if err != nil {
			return
		}
		if again := h.marshal(); !bytes.Equal(again, data) {
			t.Fatalf("re-encoded hello differs:\n got %x\nwant %x", again, data)
		}
	})
}
