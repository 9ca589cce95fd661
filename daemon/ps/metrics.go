package ps

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ClientMetrics times a process's parameter-server requests as their
// clients see them (ClientConfig.Metrics): from the call to the reply, a
// BSP pull's wait for its step included, local shards as well as remote
// ones. A nil *ClientMetrics times nothing.
type ClientMetrics struct {
	latency *prometheus.HistogramVec
}

// Label values of heterps_ps_request_duration_seconds.
const (
	opPull, opPush         = "pull", "push"
	paramTable, paramBlock = "table", "block"
)

// LatencyBuckets span a local dense pull (tens of microseconds) to a BSP
// pull that waits for a slow replica (seconds).
var LatencyBuckets = prometheus.ExponentialBuckets(25e-6, 2.5, 16)

// NewClientMetrics registers the request latency histograms with reg.
func NewClientMetrics(reg prometheus.Registerer) (*ClientMetrics, error) {
	m := &ClientMetrics{latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "heterps_ps_request_duration_seconds",
		Help:    "Parameter-server pulls and pushes as the stage's client sees them, by op (pull, push) and param (table rows, dense block).",
		Buckets: LatencyBuckets,
	}, []string{"op", "param"})}
	for _, op := range []string{opPull, opPush} {
		for _, p := range []string{paramTable, paramBlock} {
			m.latency.WithLabelValues(op, p)
		}
	}
	if err := reg.Register(m.latency); err != nil {
		return nil, err
	}
	return m, nil
}

// since records a request of op on a param kind that started at start;
// deferred with time.Now() as the call's first line.
func (m *ClientMetrics) since(op, param string, start time.Time) {
	if m != nil {
		m.latency.WithLabelValues(op, param).Observe(time.Since(start).Seconds())
	}
}

// Bytes returns the memory the shard holds against its budget: its blocks
// with their optimiser state, and its table rows at RowBytes each.
func (s *Shard) Bytes() int64 { return s.bytes.Load() }
