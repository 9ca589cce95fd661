package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"runtime"
)

// Message payload layout (the payload of every data frame). Integers are
// little-endian.
//
//	offset  size  field
//	     0     8  job
//	     8     8  stage
//	    16     8  replica
//	    24     8  step
//	    32     8  micro (micro-batch index within the step)
//	    40     8  key (table or dense-block id)
//	    48     8  batch (samples behind the message, see the types below)
//	    56     2  text length t, at most MaxText
//	    58     2  tensor count k, at most MaxTensors
//	    60     4  reserved, must be 0
//	    64     t  text, UTF-8
//	  64+t  0..7  zero padding to a multiple of 8 bytes
//	   ...   ...  k tensors, each in the tensor layout (tensor.go), back to
//	              back; the payload ends exactly after the last one
//
// Every part is a multiple of 8 bytes, so each tensor's data starts 8-aligned
// in the payload. The codec is generic: any data type carries any tensors.
// The types below are the conventions daemon/pipeline and daemon/ps use;
// receivers check the tensors they expect with MessageView.Want.

// MsgType is a frame's message type. Types below MsgData are connection
// control, handled inside Conn; the rest carry a message payload.
type MsgType uint8

const (
	// MsgHello opens the handshake (handshake.go).
	MsgHello MsgType = 1
	// MsgProof carries an HMAC proof of the cluster secret.
	MsgProof MsgType = 2
	// MsgPing keeps an idle connection alive; empty payload.
	MsgPing MsgType = 3
	// MsgGoAway announces a clean close; empty payload.
	MsgGoAway MsgType = 4

	// MsgData is the first data type.
	MsgData MsgType = 16

	// MsgActivation: stage i -> stage i+1. The micro-batch's output
	// activations as one float32 [rows, width] tensor per part, with the
	// parts' flags and the batch's rows; the exact layout is the pipeline's
	// (daemon/pipeline/exchange.go). Micro = micro-batch, Batch = rows.
	MsgActivation MsgType = 16
	// MsgGradient: stage i+1 -> stage i. The loss gradient with respect to
	// the activations of micro-batch Micro, part by part, shaped like them
	// (layout in daemon/pipeline/exchange.go).
	MsgGradient MsgType = 17
	// MsgPull: worker -> PS shard. T0 int64 [n], row ids of table Key.
	MsgPull MsgType = 18
	// MsgPullReply: PS shard -> worker. T0 float32 [n, dim], the rows in the
	// order asked.
	MsgPullReply MsgType = 19
	// MsgPushSparse: worker -> PS shard. T0 int64 [n] row ids, T1 float32
	// [n, dim] their gradients, for table Key; Batch = the replica's batch
	// size b_k (its aggregation weight). (Job, Stage, Replica, Step) make a
	// retried push recognisable.
	MsgPushSparse MsgType = 20
	// MsgPushDense: worker -> PS shard. T0 float32, the gradient of dense
	// block Key; Batch = b_k.
	MsgPushDense MsgType = 21
	// MsgAck: reply to a push, no tensors; echoes the push's metadata.
	MsgAck MsgType = 22
	// MsgError: reply to any request that failed; Text says why.
	MsgError MsgType = 23
)

var msgTypeNames = map[MsgType]string{
	MsgHello: "hello", MsgProof: "proof", MsgPing: "ping", MsgGoAway: "goaway",
	MsgActivation: "activation", MsgGradient: "gradient", MsgPull: "pull", MsgPullReply: "pull-reply",
	MsgPushSparse: "push-sparse", MsgPushDense: "push-dense", MsgAck: "ack", MsgError: "error",
}

func (t MsgType) String() string {
	if name, ok := msgTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("type %d", uint8(t))
}

const (
	// MaxTensors is the most tensors one message may carry.
	MaxTensors = 64
	// MaxText is the longest text a message may carry, in bytes.
	MaxText = 1024

	messageHeaderSize = 64
)

// Meta is the fixed metadata every message carries.
type Meta struct {
	Job, Stage, Replica, Step uint64
	Micro, Key, Batch         uint64
}

// Message is a message to send. Its tensors' data is read, not copied,
// while Send runs: don't modify it until Send returns.
type Message struct {
	Type    MsgType
	Meta    Meta
	Text    string
	Tensors []Tensor
}

// MessageView is a received message. Its tensors alias the frame they came
// in; nothing else holds that frame, so it lives as long as the view.
type MessageView struct {
	Type    MsgType
	Stream  uint32
	Meta    Meta
	Text    string
	Tensors []TensorView

	size int    // payload bytes, for the receiver's queue budget
	buf  []byte // the pooled frame the tensors alias; nil if not pooled

	ring       *sharedMem      // the peer's ring the tensors lie in (RecvShared), or nil
	start, end uint64          // where in it
	unreleased runtime.Cleanup // gives the ring's bytes back if m is dropped unreleased
}

// inRing makes m's tensors those lying at [start, end) of ring until
// Release, or until m is garbage-collected unreleased: a receiver's error
// path that forgets Release then costs the peer's ring only until the
// next collection instead of for the connection's life.
func (m *MessageView) inRing(ring *sharedMem, start, end uint64) {
	m.ring, m.start, m.end = ring, start, end
	m.unreleased = runtime.AddCleanup(m, func(r ringRef) { r.ring.release(r.start, r.end) }, ringRef{ring, start, end})
}

type ringRef struct {
	ring       *sharedMem
	start, end uint64
}

// Release hands the frame that m's tensors live in back for reuse by later
// receives; afterwards neither m's tensors nor slices from their Bytes may
// be used. Calling it is optional (an unreleased frame is garbage-collected)
// but spares large receives a fresh allocation each.
func (m *MessageView) Release() {
	switch {
	case m.buf != nil:
		putPayload(m.buf)
		m.buf = nil
		m.Tensors = nil
	case m.ring != nil:
		m.unreleased.Stop()
		m.ring.release(m.start, m.end)
		m.ring = nil
		m.Tensors = nil
	}
}

// detach copies a message that lies in a peer's ring out of it, releasing
// the ring's bytes.
func (m *MessageView) detach(maxPayload int) (*MessageView, error) {
	d, err := decodeCopy(m.Type, m.Stream, m.ring.peerBytes(m.start, m.end), maxPayload)
	m.Release()
	return d, err
}

// decodeCopy decodes a copy of payload, in a pooled buffer that the
// message's Release recycles.
func decodeCopy(typ MsgType, stream uint32, payload []byte, maxPayload int) (*MessageView, error) {
	own := append(getPayload(len(payload))[:0], payload...)
	m, err := DecodeMessage(typ, own, maxPayload)
	if err != nil {
		return nil, err
	}
	m.Stream, m.buf = stream, own
	return m, nil
}

// Want checks that the message has exactly the given tensor dtypes, in order.
func (m *MessageView) Want(dtypes ...DType) error {
	if len(m.Tensors) != len(dtypes) {
		return fmt.Errorf("wire: message type %d: %d tensors, want %d", m.Type, len(m.Tensors), len(dtypes))
	}
	for i, dt := range dtypes {
		if m.Tensors[i].DType != dt {
			return fmt.Errorf("wire: message type %d: tensor %d is %v, want %v", m.Type, i, m.Tensors[i].DType, dt)
		}
	}
	return nil
}

// encodedPayload is a message payload as the pieces a vectored write sends:
// small headers and, for each tensor, a view of its data.
type encodedPayload struct {
	pieces [][]byte
	size   int
	crc    uint32
}

// encodeMessage lays m out for sending without copying tensor data, with
// its CRC32C if checksum (else crc 0), and fails if m breaks a codec rule
// or its payload would exceed maxPayload.
func encodeMessage(m *Message, maxPayload int, checksum bool) (encodedPayload, error) {
	if m.Type < MsgData {
		return encodedPayload{}, fmt.Errorf("wire: message type %d is reserved for connection control", m.Type)
	}
	if len(m.Text) > MaxText {
		return encodedPayload{}, fmt.Errorf("wire: message text is %d bytes, limit %d", len(m.Text), MaxText)
	}
	if len(m.Tensors) > MaxTensors {
		return encodedPayload{}, fmt.Errorf("wire: message has %d tensors, limit %d", len(m.Tensors), MaxTensors)
	}
	// Headers share one backing array so that small pieces stay together.
	hdrCap := messageHeaderSize + len(m.Text) + 7
	for i := range m.Tensors {
		hdrCap += tensorHeaderBase + 8*len(m.Tensors[i].Shape) + 7
	}
	hdrs := make([]byte, 0, hdrCap)
	hdrs = appendMessageHeader(hdrs, m)
	p := encodedPayload{pieces: make([][]byte, 0, 1+2*len(m.Tensors))}
	start := 0
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if _, err := t.check(clampElems(maxPayload)); err != nil {
			return encodedPayload{}, fmt.Errorf("tensor %d: %w", i, err)
		}
		hdrs = appendTensorHeader(hdrs, t)
		if data := tensorData(t); len(data) > 0 {
			p.pieces = append(p.pieces, hdrs[start:], data)
			start = len(hdrs)
			hdrs = append(hdrs, zeroPad[:pad8(len(data))]...)
		}
	}
	if start < len(hdrs) {
		p.pieces = append(p.pieces, hdrs[start:])
	}
	for _, b := range p.pieces {
		p.size += len(b)
		if p.size > maxPayload {
			return encodedPayload{}, fmt.Errorf("wire: message payload over limit %d bytes", maxPayload)
		}
		if checksum {
			p.crc = crc32.Update(p.crc, castagnoli, b)
		}
	}
	return p, nil
}

func appendMessageHeader(dst []byte, m *Message) []byte {
	for _, v := range [...]uint64{m.Meta.Job, m.Meta.Stage, m.Meta.Replica, m.Meta.Step, m.Meta.Micro, m.Meta.Key, m.Meta.Batch} {
		dst = binary.LittleEndian.AppendUint64(dst, v)
	}
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(m.Text)))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(m.Tensors)))
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, m.Text...)
	return append(dst, zeroPad[:pad8(len(m.Text))]...)
}

// AppendMessage appends m's payload encoding to dst (a copy; Conn sends
// without one). maxPayload bounds the payload size.
func AppendMessage(dst []byte, m *Message, maxPayload int) ([]byte, error) {
	p, err := encodeMessage(m, maxPayload, false)
	if err != nil {
		return dst, err
	}
	for _, b := range p.pieces {
		dst = append(dst, b...)
	}
	return dst, nil
}

// DecodeMessage decodes a data frame's payload. The tensor views alias
// payload. maxElems bounds each tensor's element count.
func DecodeMessage(typ MsgType, payload []byte, maxElems int) (*MessageView, error) {
	const part = "message"
	if typ < MsgData {
		return nil, decodeErr(part, ErrMalformed, "type %d is connection control, not data", typ)
	}
	if len(payload) < messageHeaderSize {
		return nil, decodeErr(part, ErrTruncated, "header: got %d of %d bytes", len(payload), messageHeaderSize)
	}
	m := &MessageView{Type: typ, size: len(payload)}
	var u [7]uint64
	for i := range u {
		u[i] = binary.LittleEndian.Uint64(payload[8*i:])
	}
	m.Meta = Meta{Job: u[0], Stage: u[1], Replica: u[2], Step: u[3], Micro: u[4], Key: u[5], Batch: u[6]}
	textLen := int(binary.LittleEndian.Uint16(payload[56:]))
	count := int(binary.LittleEndian.Uint16(payload[58:]))
	if textLen > MaxText {
		return nil, decodeErr(part, ErrTooLarge, "text length %d, limit %d", textLen, MaxText)
	}
	if count > MaxTensors {
		return nil, decodeErr(part, ErrTooLarge, "tensor count %d, limit %d", count, MaxTensors)
	}
	if !allZero(payload[60:messageHeaderSize]) {
		return nil, decodeErr(part, ErrMalformed, "reserved bytes are %x, want 0", payload[60:messageHeaderSize])
	}
	rest := payload[messageHeaderSize:]
	padded := textLen + pad8(textLen)
	if len(rest) < padded {
		return nil, decodeErr(part, ErrTruncated, "text: got %d of %d bytes (padded)", len(rest), padded)
	}
	if !allZero(rest[textLen:padded]) {
		return nil, decodeErr(part, ErrMalformed, "padding after the text is %x, want 0", rest[textLen:padded])
	}
	m.Text, rest = string(rest[:textLen]), rest[padded:]
	m.Tensors = make([]TensorView, count)
	for i := range count {
		var err error
		m.Tensors[i], rest, err = decodeTensor(rest, maxElems, i)
		if err != nil {
			return nil, err
		}
	}
	if len(rest) != 0 {
		return nil, decodeErr(part, ErrMalformed, "%d trailing bytes after %d tensors", len(rest), count)
	}
	return m, nil
}
