package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/apiclient"
	"github.com/heterps/heterps/daemon/retry"
)

const exampleJob = "../../config/examples/jobs/ctrdnn-local.toml"

// notices is a stderr that tests can wait on.
type notices struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // gets a value (if none is pending) at each write
}

func newNotices() *notices { return &notices{wrote: make(chan struct{}, 1)} }

func (n *notices) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case n.wrote <- struct{}{}:
	default:
	}
	return n.buf.Write(p)
}

func (n *notices) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.buf.String()
}

// waitFor waits (at most 10s) until the notices contain sub.
func (n *notices) waitFor(t *testing.T, sub string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for !strings.Contains(n.String(), sub) {
		select {
		case <-n.wrote:
		case <-timeout:
			t.Fatalf("stderr never said %q: %s", sub, n.String())
		}
	}
}

func replyJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// TestSubmitRetriesWithOneIdempotencyKey: a submission answered 503 twice
// is retried, with a line on stderr each time, and every try carries the
// same valid Idempotency-Key; another invocation uses another key.
func TestSubmitRetriesWithOneIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get(api.IdempotencyKeyHeader))
		if len(keys)%3 != 0 {
			replyJSON(w, http.StatusServiceUnavailable, api.Error{Error: "restarting"})
			return
		}
		replyJSON(w, http.StatusCreated, api.SubmitResponse{JobID: "j1"})
	}))
	defer srv.Close()
	for range 2 {
		var out, errb bytes.Buffer
		if code := runSubmit(context.Background(), []string{exampleJob, "--coordinator", srv.URL}, &out, &errb); code != exitOK || strings.TrimSpace(out.String()) != "j1" {
			t.Fatalf("submit: exit %d, stdout %q, stderr %s", code, out.String(), errb.String())
		}
		if n := strings.Count(errb.String(), "503 Service Unavailable: restarting; retrying in"); n != 2 {
			t.Errorf("stderr has %d retry lines, want 2: %s", n, errb.String())
		}
	}
	if len(keys) != 6 {
		t.Fatalf("%d requests, want 6", len(keys))
	}
	if err := api.CheckIdempotencyKey(keys[0]); err != nil {
		t.Error(err)
	}
	if keys[1] != keys[0] || keys[2] != keys[0] || keys[3] == keys[0] || keys[4] != keys[3] || keys[5] != keys[3] {
		t.Errorf("keys %q: want one per invocation, repeated on its retries", keys)
	}
}

// reusableAddr returns a loopback address that nothing listens on now.
func reusableAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// serveAt serves h on addr until the returned function is called.
func serveAt(t *testing.T, addr string, h http.Handler) (stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	var once sync.Once
	stop = func() { once.Do(srv.Close) }
	t.Cleanup(stop)
	return stop
}

// TestSubmitWaitRidesOutACoordinatorRestart: while submit --wait follows a
// job the coordinator goes away (connections refused) and comes back on
// the same address; submit says it is waiting and reports the job's end.
func TestSubmitWaitRidesOutACoordinatorRestart(t *testing.T) {
	addr := reusableAddr(t)
	polled := make(chan struct{})
	var once sync.Once
	stop := serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			replyJSON(w, http.StatusCreated, api.SubmitResponse{JobID: "j1"})
			return
		}
		replyJSON(w, http.StatusOK, api.JobStatus{ID: "j1", State: api.JobRunning, Step: 1, Steps: 2})
		once.Do(func() { close(polled) })
	}))
	stderr := newNotices()
	var out bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- runSubmit(context.Background(), []string{exampleJob, "--coordinator", "http://" + addr, "--wait"}, &out, stderr)
	}()
	<-polled
	stop()
	stderr.waitFor(t, "; retrying in") // connection refused, or reset if a poll was in flight
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, http.StatusOK, api.JobStatus{ID: "j1", Name: "ctrdnn-local", State: api.JobDone, Step: 2, Steps: 2})
	}))
	if c := <-code; c != exitOK || !strings.Contains(out.String(), "job j1 (ctrdnn-local): done") {
		t.Errorf("submit --wait: exit %d, stdout %q, stderr %s", c, out.String(), stderr.String())
	}
}

// TestStatusWaitsForTheCoordinator: status started while nothing listens
// retries until the coordinator is up.
func TestStatusWaitsForTheCoordinator(t *testing.T) {
	addr := reusableAddr(t)
	stderr := newNotices()
	var out bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- runStatus(context.Background(), []string{"--coordinator", "http://" + addr}, &out, stderr)
	}()
	stderr.waitFor(t, "connection refused; retrying in")
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, http.StatusOK, []api.JobStatus{{ID: "j7", Name: "x", State: api.JobRunning}})
	}))
	if c := <-code; c != exitOK || !strings.Contains(out.String(), "j7") {
		t.Errorf("status: exit %d, stdout %q, stderr %s", c, out.String(), stderr.String())
	}
}

// TestRetriesAreBounded: a coordinator that stays unavailable is given up
// on after the policy's time; one that refuses the request (400) is not
// retried.
func TestRetriesAreBounded(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/v1/jobs/bad" {
			replyJSON(w, http.StatusBadRequest, api.Error{Error: "no"})
			return
		}
		replyJSON(w, http.StatusGatewayTimeout, api.Error{Error: "down"})
	}))
	defer srv.Close()
	c := newCoordClient(srv.URL)
	defer c.close()
	var notes bytes.Buffer
	c.Retry = retry.Policy{Min: time.Millisecond, Max: 4 * time.Millisecond, GiveUp: 50 * time.Millisecond}
	c.OnRetry = retryNotices(&notes)
	_, err := c.job(context.Background(), "down")
	if !apiclient.Unavailable(err) || !strings.Contains(err.Error(), "gave up after retrying for 50ms") {
		t.Errorf("always 504: %v, want it given up", err)
	}
	if n := strings.Count(notes.String(), "retrying in"); n < 2 || n != calls["/v1/jobs/down"]-1 {
		t.Errorf("%d requests and %d retry lines, want a line before each retry", calls["/v1/jobs/down"], n)
	}
	notes.Reset()
	if _, err := c.job(context.Background(), "bad"); err == nil || calls["/v1/jobs/bad"] != 1 || notes.Len() != 0 {
		t.Errorf("400: %v after %d requests (%q), want one request and no retry", err, calls["/v1/jobs/bad"], notes.String())
	}
}
