package wire

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sampleMessage() *Message {
	return &Message{
		Type: MsgPushSparse,
		Meta: Meta{Job: 1, Stage: 2, Replica: 3, Step: 1 << 40, Micro: 5, Key: 6, Batch: 512},
		Text: "push",
		Tensors: []Tensor{
			I64Tensor([]int64{10, 20, 30}, 3),
			F32Tensor([]float32{1, 2, 3, 4, 5, 6}, 3, 2),
			F32Tensor(nil, 0, 2),
		},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []*Message{sampleMessage(), {Type: MsgAck}, {Type: MsgError, Text: strings.Repeat("x", MaxText)}} {
		payload, err := AppendMessage(nil, m, 1<<20)
		if err != nil {
			t.Fatalf("type %d: %v", m.Type, err)
		}
		v, err := DecodeMessage(m.Type, payload, 1<<20)
		if err != nil {
			t.Fatalf("type %d: %v", m.Type, err)
		}
		if v.Type != m.Type || v.Meta != m.Meta || v.Text != m.Text || len(v.Tensors) != len(m.Tensors) {
			t.Fatalf("got %+v, sent %+v", v, m)
		}
		for i := range m.Tensors {
			got, want := v.Tensors[i].Tensor(), m.Tensors[i]
			if got.DType != want.DType || !equalShape(got.Shape, want.Shape) ||
				!reflect.DeepEqual(nilIfEmpty(got.F32), nilIfEmpty(want.F32)) || !reflect.DeepEqual(nilIfEmpty(got.I64), nilIfEmpty(want.I64)) {
				t.Errorf("tensor %d: got %+v, want %+v", i, got, want)
			}
		}
	}
}

func TestMessageHeaderOffsets(t *testing.T) {
	m := &Message{Type: MsgAck, Meta: Meta{Job: 1, Stage: 2, Replica: 3, Step: 4, Micro: 5, Key: 6, Batch: 7}, Text: "hi"}
	p, err := AppendMessage(nil, m, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{1, 2, 3, 4, 5, 6, 7} {
		if got := binary.LittleEndian.Uint64(p[8*i:]); got != want {
			t.Errorf("offset %d: %d, want %d", 8*i, got, want)
		}
	}
	want := []byte{2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i', 0, 0, 0, 0, 0, 0}
	if string(p[56:]) != string(want) {
		t.Errorf("text length, tensor count, reserved, text, padding:\n got %x\nwant %x", p[56:], want)
	}
}

func TestEncodeMessageChecksum(t *testing.T) {
	m := sampleMessage()
	p, err := encodeMessage(m, 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	flat, _ := AppendMessage(nil, m, 1<<20)
	frame := AppendFrame(nil, Header{Type: m.Type}, flat)
	if p.size != len(flat) || p.crc != binary.LittleEndian.Uint32(frame[24:]) {
		t.Errorf("pieces give size %d crc %#x, flat payload %d crc %#x", p.size, p.crc, len(flat), binary.LittleEndian.Uint32(frame[24:]))
	}
}

func TestEncodeMessageRejects(t *testing.T) {
	many := &Message{Type: MsgPushDense, Tensors: make([]Tensor, MaxTensors+1)}
	for i := range many.Tensors {
		many.Tensors[i] = F32Tensor(nil, 0)
	}
	cases := map[string]*Message{
		"control type":  {Type: MsgPing},
		"long text":     {Type: MsgError, Text: strings.Repeat("x", MaxText+1)},
		"many tensors":  many,
		"bad tensor":    {Type: MsgPushDense, Tensors: []Tensor{F32Tensor([]float32{1}, 2)}},
		"over max size": {Type: MsgPushDense, Tensors: []Tensor{F32Tensor(make([]float32, 100), 100)}},
	}
	for name, m := range cases {
		if _, err := AppendMessage(nil, m, 400); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

func TestDecodeMessageRejects(t *testing.T) {
	good, _ := AppendMessage(nil, sampleMessage(), 1<<20)
	with := func(off int, v uint16) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint16(b[off:], v)
		return b
	}
	cases := []struct {
		name    string
		typ     MsgType
		payload []byte
		want    error
		part    string
	}{
		{"control type", MsgPing, good, ErrMalformed, "message"},
		{"short header", MsgPushSparse, good[:59], ErrTruncated, "message"},
		{"text over limit", MsgPushSparse, with(56, MaxText+1), ErrTooLarge, "message"},
		{"text past end", MsgPushSparse, with(56, 1000), ErrTruncated, "message"},
		{"tensor count over limit", MsgPushSparse, with(58, MaxTensors+1), ErrTooLarge, "message"},
		{"missing tensor", MsgPushSparse, with(58, 4), ErrTruncated, "message tensor 3"},
		{"trailing bytes", MsgPushSparse, with(58, 2), ErrMalformed, "message"},
		{"reserved bytes", MsgPushSparse, with(62, 1), ErrMalformed, "message"},
		{"text padding", MsgPushSparse, with(68, 1), ErrMalformed, "message"},
		{"cut inside tensor 1", MsgPushSparse, good[:len(good)-30], ErrTruncated, "message tensor 1"},
	}
	for _, c := range cases {
		_, err := DecodeMessage(c.typ, c.payload, 1<<20)
		var de *DecodeError
		if !errors.Is(err, c.want) || !errors.As(err, &de) || de.Part != c.part {
			t.Errorf("%s: err = %v, want %v in %q", c.name, err, c.want, c.part)
		}
	}
}

func TestMessageViewWant(t *testing.T) {
	payload, _ := AppendMessage(nil, sampleMessage(), 1<<20)
	v, err := DecodeMessage(MsgPushSparse, payload, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Want(Int64, Float32, Float32); err != nil {
		t.Errorf("Want with the right dtypes: %v", err)
	}
	if err := v.Want(Int64, Float32); err == nil {
		t.Error("Want accepted a wrong tensor count")
	}
	if err := v.Want(Float32, Float32, Float32); err == nil {
		t.Error("Want accepted a wrong dtype")
	}
}
