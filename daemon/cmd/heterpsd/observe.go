package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Log formats (--log-format).
const (
	logText = "text"
	logJSON = "json"
)

// newLogger builds the daemon's logger: --log-format on standard error,
// or appended to --log-file (created 0600). close releases the file.
func newLogger(f *flags, stderr io.Writer) (log *slog.Logger, close func(), err error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, nil, fmt.Errorf("--log-level: %w", err)
	}
	if f.logFormat != logText && f.logFormat != logJSON {
		return nil, nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
	}
	out, close := stderr, func() {}
	if f.logFile != "" {
		file, err := os.OpenFile(f.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("--log-file: %w", err)
		}
		out, close = file, func() { file.Close() }
	}
	opts := &slog.HandlerOptions{Level: level}
	if f.logFormat == logJSON {
		return slog.New(slog.NewJSONHandler(out, opts)), close, nil
	}
	return slog.New(slog.NewTextHandler(out, opts)), close, nil
}

// newRegistry is the process's metrics registry: its own, not
// prometheus.DefaultRegisterer, so that daemons run in one process (tests)
// keep their metrics apart. It holds the Go runtime's and the process's
// collectors; the role adds its own.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// metricsServer serves /metrics, /healthz, /readyz and, with --pprof,
// /debug/pprof/ on the --metrics-listen address.
type metricsServer struct {
	ln   net.Listener
	srv  *http.Server
	wg   sync.WaitGroup
	once sync.Once
}

// startMetrics listens on --metrics-listen (nothing without it) and serves
// reg's metrics and ready's verdict until stop is called. ready returns
// nil when the daemon is ready, else the reason it is not.
func startMetrics(f *flags, reg prometheus.Gatherer, ready func() error) (*metricsServer, error) {
	if f.metricsListen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", f.metricsListen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	m := &metricsServer{ln: ln, srv: &http.Server{Handler: metricsHandler(reg, ready, f.pprof), ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}}
	m.wg.Go(func() { _ = m.srv.Serve(ln) }) // ends with ErrServerClosed once stop shuts it down
	return m, nil
}

// addr is where the server listens; "" for none.
func (m *metricsServer) addr() string {
	if m == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// stop shuts the server down (a second at most for open scrapes) and
// waits for it.
func (m *metricsServer) stop() {
	if m == nil {
		return
	}
	m.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if m.srv.Shutdown(ctx) != nil {
			m.srv.Close()
		}
		m.wg.Wait()
	})
}

func metricsHandler(reg prometheus.Gatherer, ready func() error, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// printMetricsAddr prints the second line a parent reads to learn the
// metrics port: "metrics http://127.0.0.1:9100".
func printMetricsAddr(stdout io.Writer, m *metricsServer) {
	if m != nil {
		fmt.Fprintf(stdout, "metrics http://%s\n", m.addr())
	}
}

// readiness is a ready check that is set once the daemon is built: the
// metrics listener is up before, and answers 503 until then.
type readiness struct{ f atomic.Pointer[func() error] }

func (r *readiness) set(f func() error) { r.f.Store(&f) }

func (r *readiness) check() error {
	if f := r.f.Load(); f != nil {
		return (*f)()
	}
	return errors.New("starting")
}
