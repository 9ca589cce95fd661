package wire

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTestMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitCount waits (at most 10s) until c reads want.
func waitCount(t *testing.T, c prometheus.Collector, want float64, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(c) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", what, testutil.ToFloat64(c), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMetricsCountFramesAndBytes: an echoed message is one frame each way
// on each side, and both sides count the same bytes.
func TestMetricsCountFramesAndBytes(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	server, client := newTestMetrics(t), newTestMetrics(t)
	scfg, ccfg := testConfig("server", logs), testConfig("client", logs)
	scfg.Metrics, ccfg.Metrics = server, client
	srv := startEcho(t, scfg)
	echoOK(t, srv.addr(), ccfg)
	if got := testutil.ToFloat64(client.framesSent); got != 1 {
		t.Errorf("client sent %v frames, want 1", got)
	}
	waitCount(t, server.framesSent, 1, "server frames sent")
	sent := testutil.ToFloat64(client.bytesSent)
	if sent <= HeaderSize {
		t.Errorf("client sent %v bytes, want more than a header", sent)
	}
	waitCount(t, server.bytesReceived, sent, "server bytes received")
	if got := testutil.ToFloat64(client.bytesReceived); got != testutil.ToFloat64(server.bytesSent) {
		t.Errorf("client received %v bytes, server sent %v", got, testutil.ToFloat64(server.bytesSent))
	}
	if got := testutil.ToFloat64(client.sharedSent); got != 0 {
		t.Errorf("a small message counted %v bytes through shared memory", got)
	}
}

// TestMetricsCountSharedBytes: a large message to a same-host peer goes
// through its shared ring, and counts there as well as in the bytes sent.
func TestMetricsCountSharedBytes(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	metrics := newTestMetrics(t)
	ccfg := testConfig("client", logs)
	ccfg.Metrics = metrics
	c := dialEcho(t, testConfig("server", logs), ccfg)
	if err := c.Send(testContext(t), 1, floatMessage(filled(64<<10, 0))); err != nil {
		t.Fatal(err)
	}
	shared, sent := testutil.ToFloat64(metrics.sharedSent), testutil.ToFloat64(metrics.bytesSent)
	if shared < 256<<10 || sent != shared+HeaderSize {
		t.Errorf("a 256 KiB message: %v bytes sent, %v through shared memory", sent, shared)
	}
}

// TestMetricsCountRejectedHandshakes: a wrong secret, a mode mismatch and a
// silent socket each count under their reason; a good peer counts none.
func TestMetricsCountRejectedHandshakes(t *testing.T) {
	checkLeaks(t)
	logs := &logSink{}
	m := newTestMetrics(t)
	cfg := testConfig("server", logs)
	cfg.Metrics, cfg.HelloTimeout = m, 200*time.Millisecond
	srv := startEcho(t, cfg)

	echoOK(t, srv.addr(), testConfig("client", logs))
	bad := testConfig("intruder", logs)
	bad.Secret = []byte("some-other-secret-0123456789")
	Dial(testContext(t), srv.addr(), bad, "")
	waitCount(t, m.handshakeFailures.WithLabelValues(RejectBadMAC), 1, "bad_mac")

	plain := testConfig("plain", logs)
	plain.Plain, plain.Secret = true, nil
	Dial(testContext(t), srv.addr(), plain, "")
	waitCount(t, m.handshakeFailures.WithLabelValues(RejectModeMismatch), 1, "mode_mismatch")

	openIdle(t, srv.addr(), 1, nil)
	waitCount(t, m.handshakeFailures.WithLabelValues(RejectTimeout), 1, "timeout")

	if n := testutil.CollectAndCount(m.handshakeFailures); n != len(rejectReasons) {
		t.Errorf("%d reason series, want all %d from the start", n, len(rejectReasons))
	}
	total := 0.0
	for _, r := range rejectReasons {
		total += testutil.ToFloat64(m.handshakeFailures.WithLabelValues(r))
	}
	if total != 3 {
		t.Errorf("%v rejections in all, want 3", total)
	}
}

func TestRejectReason(t *testing.T) {
	timeout := &net.OpError{Op: "read", Err: errTimeout{}}
	for _, c := range []struct {
		err  error
		want string
	}{
		{decodeErr("frame header", ErrBadMagic, "x"), RejectMalformed},
		{decodeErr("frame header", ErrTruncated, "x"), RejectHungUp},
		{timeout, RejectTimeout},
		{ErrPlainNotLoopback, RejectNotLoopback},
		{net.ErrClosed, RejectOther},
	} {
		if got := rejectReason(c.err); got != c.want {
			t.Errorf("%v: %s, want %s", c.err, got, c.want)
		}
	}
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// TestMetricsCountEvictedHandshakes: a connection dropped, pending, to make
// room for a newer one from its host counts as evicted.
func TestMetricsCountEvictedHandshakes(t *testing.T) {
	checkLeaks(t)
	m := newTestMetrics(t)
	cfg := testConfig("server", &logSink{})
	cfg.HandshakeTimeout, cfg.HelloTimeout, cfg.Metrics = time.Minute, time.Minute, m
	srv := startEcho(t, cfg)
	openIdle(t, srv.addr(), maxHandshakesPerHost, nil)
	waitPending(t, srv.ln, maxHandshakesPerHost)
	time.Sleep(evictAfter + 100*time.Millisecond) // only handshakes pending this long are evicted
	openIdle(t, srv.addr(), 1, nil)
	waitCount(t, m.handshakeFailures.WithLabelValues(RejectEvicted), 1, "evicted")
	if got := testutil.ToFloat64(m.handshakeFailures.WithLabelValues(RejectTimeout)); got != 0 {
		t.Errorf("%v timeouts, want 0", got)
	}
}
