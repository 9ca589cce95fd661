package wire

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts a node's data-plane traffic and the handshakes its
// listeners reject. A nil *Metrics counts nothing; one Metrics may be
// shared by every Config of a process (Config.Metrics).
type Metrics struct {
	bytesSent, bytesReceived   prometheus.Counter
	framesSent, framesReceived prometheus.Counter
	sharedSent                 prometheus.Counter
	handshakeFailures          *prometheus.CounterVec
}

// Reasons a listener rejects a connection before or during the handshake:
// the values of heterps_wire_handshake_failures_total's reason label.
const (
	RejectBadMAC         = "bad_mac"          // the dialer's proof is wrong: another cluster secret
	RejectModeMismatch   = "mode_mismatch"    // plain against authenticated
	RejectTimeout        = "timeout"          // no hello in time, or the handshake ran out of time
	RejectTooManyPending = "too_many_pending" // refused: past the hard bound on pending handshakes
	RejectEvicted        = "evicted"          // dropped, pending, to make room for a newer connection
	RejectMalformed      = "malformed"        // a frame or hello that does not decode
	RejectHungUp         = "hung_up"          // the peer closed during the handshake
	RejectNotLoopback    = "not_loopback"     // plain mode off loopback
	RejectTLS            = "tls"              // no certificate of the cluster CA, an expired one, or not TLS at all
	RejectOther          = "other"
)

var rejectReasons = []string{RejectBadMAC, RejectModeMismatch, RejectTimeout, RejectTooManyPending, RejectEvicted,
	RejectMalformed, RejectHungUp, RejectNotLoopback, RejectTLS, RejectOther}

// NewMetrics registers the data plane's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		bytesSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_wire_sent_bytes_total",
			Help: "Bytes of data-plane message frames (header and payload) written after the handshake; pings and goodbyes are left out."}),
		bytesReceived: prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_wire_received_bytes_total",
			Help: "Bytes of data-plane message frames (header and payload) read after the handshake; pings and goodbyes are left out."}),
		framesSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_wire_sent_frames_total",
			Help: "Data-plane message frames written after the handshake."}),
		framesReceived: prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_wire_received_frames_total",
			Help: "Data-plane message frames read after the handshake."}),
		sharedSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_wire_shared_sent_bytes_total",
			Help: "Of the bytes sent, the payload bytes written into a same-host peer's shared-memory ring instead of the socket."}),
		handshakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heterps_wire_handshake_failures_total",
			Help: "Connections a listener rejected before or during the handshake, by reason."}, []string{"reason"}),
	}
	for _, r := range rejectReasons {
		m.handshakeFailures.WithLabelValues(r) // every reason shows, at 0 until it happens
	}
	for _, c := range []prometheus.Collector{m.bytesSent, m.bytesReceived, m.framesSent, m.framesReceived, m.sharedSent, m.handshakeFailures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) frameSent(bytes int) {
	if m != nil {
		m.framesSent.Inc()
		m.bytesSent.Add(float64(bytes))
	}
}

func (m *Metrics) sharedPayload(bytes int) {
	if m != nil {
		m.sharedSent.Add(float64(bytes))
	}
}

func (m *Metrics) frameReceived(bytes int) {
	if m != nil {
		m.framesReceived.Inc()
		m.bytesReceived.Add(float64(bytes))
	}
}

// rejected counts a connection the listener dropped for err (evicted: to
// make room for a newer one); one dropped because the listener is closing
// (ctx ended) is not a rejection.
func (m *Metrics) rejected(ctx context.Context, err error, evicted bool) {
	if m == nil || ctx.Err() != nil {
		return
	}
	reason := rejectReason(err)
	if evicted {
		reason = RejectEvicted
	}
	m.handshakeFailures.WithLabelValues(reason).Inc()
}

func (m *Metrics) refused() {
	if m != nil {
		m.handshakeFailures.WithLabelValues(RejectTooManyPending).Inc()
	}
}

// Sentinel reasons the handshake wraps beside ErrAuth.
var (
	errBadMAC       = errors.New("bad MAC")
	errModeMismatch = errors.New("mode mismatch")
)

// rejectReason sorts a handshake error into one of the Reject* reasons.
func rejectReason(err error) string {
	var ne net.Error
	var de *DecodeError
	switch {
	case errors.Is(err, errTLS):
		return RejectTLS
	case errors.Is(err, errBadMAC):
		return RejectBadMAC
	case errors.Is(err, errModeMismatch):
		return RejectModeMismatch
	case errors.Is(err, ErrPlainNotLoopback):
		return RejectNotLoopback
	case errors.As(err, &ne) && ne.Timeout():
		return RejectTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, ErrTruncated):
		return RejectHungUp
	case errors.As(err, &de):
		return RejectMalformed
	}
	return RejectOther
}
