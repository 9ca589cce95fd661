package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/retry"
)

// server answers each request with the next of replies (the last one
// repeats) and records what it got.
type server struct {
	mu      sync.Mutex
	replies []reply
	got     []got
}

type reply struct {
	code int
	body string
}

type got struct {
	method, path, contentType, idempotency string
	body                                   []byte
	verifyErr                              error
}

var key = api.ControlKey([]byte("cluster secret"))

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	_, verr := api.Verify(r, body, key, time.Now())
	s.mu.Lock()
	s.got = append(s.got, got{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get(api.IdempotencyKeyHeader), body, verr})
	rep := s.replies[min(len(s.got), len(s.replies))-1]
	s.mu.Unlock()
	w.WriteHeader(rep.code)
	io.WriteString(w, rep.body)
}

func start(t *testing.T, replies ...reply) (*server, *Client) {
	s := &server{replies: replies}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, New(srv.URL+"/", srv.Client())
}

// TestPostJSONSignsAndDecodes: a signed client posts JSON that the
// coordinator's Verify accepts and decodes the JSON reply.
func TestPostJSONSignsAndDecodes(t *testing.T) {
	s, c := start(t, reply{200, `{"node_id":"n1","heartbeat_interval_ms":500}`})
	c.Key = key
	var resp api.RegisterResponse
	if err := c.PostJSON(context.Background(), "/v1/nodes/register", api.RegisterRequest{Name: "a"}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.NodeID != "n1" || resp.HeartbeatIntervalMS != 500 {
		t.Errorf("reply %+v", resp)
	}
	g := s.got[0]
	if g.method != http.MethodPost || g.path != "/v1/nodes/register" || g.contentType != api.ContentTypeJSON {
		t.Errorf("request %s %s (%s)", g.method, g.path, g.contentType)
	}
	var sent api.RegisterRequest
	if err := json.Unmarshal(g.body, &sent); err != nil || sent.Name != "a" {
		t.Errorf("body %s: %v", g.body, err)
	}
	if g.verifyErr != nil {
		t.Errorf("the coordinator's Verify: %v", g.verifyErr)
	}
}

// TestUnsignedWithoutKey: without a key no Authorization goes out.
func TestUnsignedWithoutKey(t *testing.T) {
	s, c := start(t, reply{200, `[]`})
	var out []api.JobStatus
	if err := c.Get(context.Background(), "/v1/jobs", &out); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.got[0].verifyErr, api.ErrUnauthorized) {
		t.Errorf("an unsigned request passed Verify: %v", s.got[0].verifyErr)
	}
}

// TestStatusErrorCarriesTheCoordinatorsMessage: a 4xx comes back as a
// StatusError with the api.Error message (or the body's text), not retried.
func TestStatusErrorCarriesTheCoordinatorsMessage(t *testing.T) {
	for _, tc := range []struct{ body, msg string }{
		{`{"error":"job 7: no such job"}`, "job 7: no such job"},
		{"plain text\n", "plain text"},
	} {
		s, c := start(t, reply{404, tc.body})
		c.Retry = retry.Policy{Min: time.Millisecond, Max: 4 * time.Millisecond, GiveUp: time.Second}
		err := c.Get(context.Background(), "/v1/jobs/7?file=jobs%2Fa.toml", &api.JobStatus{})
		var se *StatusError
		if !errors.As(err, &se) || se.Code != 404 || se.Message != tc.msg {
			t.Fatalf("%v, want a StatusError 404 %q", err, tc.msg)
		}
		if want := "coordinator: GET /v1/jobs/7: 404 Not Found: " + tc.msg; err.Error() != want { // the query left out
			t.Errorf("%q, want %q", err, want)
		}
		if Unavailable(err) || len(s.got) != 1 {
			t.Errorf("404: unavailable %v after %d requests, want one", Unavailable(err), len(s.got))
		}
	}
}

// TestRetriesWhileUnavailable: 503s are retried with the same idempotency
// key, each try signed afresh, until the coordinator answers; OnRetry
// hears of each wait, and each wait lies within the policy.
func TestRetriesWhileUnavailable(t *testing.T) {
	s, c := start(t, reply{503, `{"error":"restarting"}`}, reply{503, `{"error":"restarting"}`}, reply{200, `{"job_id":"j1"}`})
	c.Key = key
	c.Retry = retry.Policy{Min: time.Millisecond, Max: 4 * time.Millisecond, GiveUp: time.Minute}
	var waits []time.Duration
	c.OnRetry = func(err error, wait time.Duration) {
		if !strings.Contains(err.Error(), "503 Service Unavailable: restarting") {
			t.Errorf("OnRetry heard %v", err)
		}
		waits = append(waits, wait)
	}
	var r api.SubmitResponse
	req := Request{Method: http.MethodPost, Path: "/v1/jobs", ContentType: api.ContentTypeTOML, Body: []byte("x = 1"), IdempotencyKey: api.NewIdempotencyKey()}
	if err := c.Do(context.Background(), req, &r); err != nil || r.JobID != "j1" {
		t.Fatalf("%v, %+v", err, r)
	}
	if len(s.got) != 3 || len(waits) != 2 {
		t.Fatalf("%d requests and %d waits, want 3 and 2", len(s.got), len(waits))
	}
	for i, g := range s.got {
		if g.idempotency != req.IdempotencyKey || g.verifyErr != nil {
			t.Errorf("try %d: key %q (want %q), Verify: %v", i, g.idempotency, req.IdempotencyKey, g.verifyErr)
		}
	}
	for _, w := range waits {
		if w < c.Retry.Min || w > c.Retry.Max {
			t.Errorf("wait %s outside [%s, %s]", w, c.Retry.Min, c.Retry.Max)
		}
	}
}

// TestGivesUp: a coordinator that stays unavailable is given up on after
// GiveUp, and the error says so; without GiveUp one try is made.
func TestGivesUp(t *testing.T) {
	s, c := start(t, reply{502, "bad gateway"})
	c.Retry = retry.Policy{Min: time.Millisecond, Max: 4 * time.Millisecond, GiveUp: 30 * time.Millisecond}
	err := c.Get(context.Background(), "/v1/nodes", &[]api.NodeStatus{})
	if !Unavailable(err) || !strings.Contains(err.Error(), "gave up after retrying for 30ms") || len(s.got) < 3 {
		t.Errorf("%v after %d requests", err, len(s.got))
	}
	s, c = start(t, reply{502, "bad gateway"})
	if err := c.Get(context.Background(), "/v1/nodes", &[]api.NodeStatus{}); !Unavailable(err) || len(s.got) != 1 {
		t.Errorf("no retry policy: %v after %d requests, want one", err, len(s.got))
	}
}

// TestRefusedIsUnavailable: a refused connection (nothing sent) may be
// retried; the wait ends with the context.
func TestRefusedIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := New("http://"+addr, &http.Client{})
	err = c.PostJSON(context.Background(), "/v1/nodes/register", api.RegisterRequest{}, &api.RegisterResponse{})
	if !Unavailable(err) {
		t.Fatalf("refused: %v, want unavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.Retry = retry.Policy{Min: time.Hour, Max: time.Hour, GiveUp: 2 * time.Hour}
	c.OnRetry = func(error, time.Duration) { cancel() }
	if err := c.Get(ctx, "/v1/jobs", nil); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "while waiting to retry") {
		t.Errorf("cancelled while waiting: %v", err)
	}
}

// TestDroppedPostIsNotRetried: a POST whose connection dropped may have
// been served: it is not unavailable (a GET would be).
func TestDroppedPostIsNotRetried(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	c := New(srv.URL, srv.Client())
	if err := c.PostJSON(context.Background(), "/v1/jobs", struct{}{}, nil); err == nil || Unavailable(err) {
		t.Errorf("dropped POST: %v, want a plain error", err)
	}
	if err := c.Get(context.Background(), "/v1/jobs", nil); !Unavailable(err) {
		t.Errorf("dropped GET: %v, want unavailable", err)
	}
}

// TestBadReplyJSON: a 200 whose body is not the expected JSON is an error
// naming the request.
func TestBadReplyJSON(t *testing.T) {
	_, c := start(t, reply{200, "not json"})
	err := c.Get(context.Background(), "/v1/alloc", &api.AllocStatus{})
	if err == nil || !strings.Contains(err.Error(), "GET /v1/alloc: reply") {
		t.Errorf("%v", err)
	}
}

// TestAnOversizedReplyIsRefusedAsSuch: a reply past MaxReply is not read
// further, and the error says it was too large rather than that its JSON
// ended early.
func TestAnOversizedReplyIsRefusedAsSuch(t *testing.T) {
	_, c := start(t, reply{200, "[" + strings.Repeat(`"x",`, MaxReply/4) + `"x"]`})
	err := c.Get(context.Background(), "/v1/jobs", &[]string{})
	if err == nil || !strings.Contains(err.Error(), "GET /v1/jobs: reply larger than 64 MiB") {
		t.Errorf("%v", err)
	}
}
