package coord

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// signedRequest is one signed request that can be sent again byte for
// byte, as an eavesdropper who captured it would.
type signedRequest struct {
	method, path, auth string
	body               []byte
}

func sign(method, path string, body []byte, key []byte) signedRequest {
	return signAt(method, path, body, key, time.Now())
}

func signAt(method, path string, body []byte, key []byte, at time.Time) signedRequest {
	req := httptest.NewRequest(method, path, nil)
	api.Sign(req, body, key, at)
	return signedRequest{method: method, path: path, auth: req.Header.Get("Authorization"), body: body}
}

// send serves s on h and returns the status and the error message, if any.
func (s signedRequest) send(h http.Handler) (int, string, []byte) {
	req := httptest.NewRequest(s.method, s.path, strings.NewReader(string(s.body)))
	req.Header.Set("Content-Type", api.ContentTypeJSON)
	req.Header.Set("Authorization", s.auth)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var e api.Error
	json.Unmarshal(rec.Body.Bytes(), &e)
	return rec.Code, e.Error, rec.Body.Bytes()
}

func newSignedCoordinator(t *testing.T) (*Coordinator, []byte) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	c, err := New(Config{Catalog: loadTestCatalog(t), ControlSecret: secret, HeartbeatTimeout: patience,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	startedASecondAgo(c)
	return c, api.ControlKey(secret)
}

// startedASecondAgo moves c's start a second back, before its Handler is
// made, so that requests signed now pass: those signed in the second a
// coordinator starts are refused (its predecessor may have served them).
func startedASecondAgo(c *Coordinator) {
	c.started = c.started.Add(-time.Second)
}

// TestReplayedRegisterAndHeartbeatAreRefused: a captured register or
// heartbeat sent again is answered 401 "replayed request" and changes
// nothing (the replayed register does not replace the live node); fresh
// requests of the same content pass.
func TestReplayedRegisterAndHeartbeatAreRefused(t *testing.T) {
	c, key := newSignedCoordinator(t)
	h := c.Handler()
	regBody, _ := json.Marshal(newFakeNode("cpu-a", "cpu", 2, 7001).req)
	register := sign("POST", "/v1/nodes/register", regBody, key)
	code, msg, raw := register.send(h)
	if code != http.StatusOK {
		t.Fatalf("register: %d %s", code, msg)
	}
	var reg api.RegisterResponse
	if err := json.Unmarshal(raw, &reg); err != nil {
		t.Fatal(err)
	}
	if code, msg, _ := register.send(h); code != http.StatusUnauthorized || !strings.Contains(msg, "replayed request") {
		t.Errorf("replayed register: %d %q, want 401 replayed request", code, msg)
	}
	beat := sign("POST", "/v1/nodes/"+reg.NodeID+"/heartbeat", []byte(`{}`), key)
	if code, msg, _ := beat.send(h); code != http.StatusOK {
		t.Fatalf("heartbeat: %d %s", code, msg)
	}
	if code, msg, _ := beat.send(h); code != http.StatusUnauthorized || !strings.Contains(msg, "replayed request") {
		t.Errorf("replayed heartbeat: %d %q, want 401 replayed request", code, msg)
	}
	if code, msg, _ := sign("POST", "/v1/nodes/"+reg.NodeID+"/heartbeat", []byte(`{}`), key).send(h); code != http.StatusOK {
		t.Errorf("a fresh heartbeat: %d %s", code, msg)
	}
	c.mu.Lock()
	nodes := c.nodeStatuses()
	c.mu.Unlock()
	if len(nodes) != 1 || nodes[0].State != api.NodeAlive || nodes[0].ID != reg.NodeID {
		t.Errorf("nodes after the replays: %+v, want only %s, alive", nodes, reg.NodeID)
	}
	if code, msg, _ := sign("POST", "/v1/nodes/register", regBody, key).send(h); code != http.StatusOK {
		t.Errorf("a fresh register: %d %s", code, msg)
	}
}

// TestUnsignedOldFormatIsRefused: a request signed in the format without a
// nonce is refused with a message that says to upgrade.
func TestUnsignedOldFormatIsRefused(t *testing.T) {
	c, key := newSignedCoordinator(t)
	s := sign("GET", "/v1/nodes", nil, key)
	s.auth = s.auth[:strings.Index(s.auth, ",n=")] + s.auth[strings.Index(s.auth, ",s="):]
	if code, msg, _ := s.send(c.Handler()); code != http.StatusUnauthorized || !strings.Contains(msg, "upgrade") {
		t.Errorf("old format: %d %q, want 401 saying to upgrade", code, msg)
	}
}

// TestForgedRequestsDoNotFillTheNonceCache: with room for one nonce,
// requests with a bad MAC are refused without taking it, a good one takes
// it, and the next good one finds the cache full (503).
func TestForgedRequestsDoNotFillTheNonceCache(t *testing.T) {
	_, key := newSignedCoordinator(t)
	c, err := New(Config{Catalog: loadTestCatalog(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := c.authenticated(c.Handler(), key, api.NewNonceCache(1)) // c has no secret: Handler is the bare API
	forger := api.ControlKey([]byte("another secret of enough bytes!!"))
	for range 3 {
		if code, _, _ := sign("GET", "/v1/nodes", nil, forger).send(h); code != http.StatusUnauthorized {
			t.Fatalf("forged: %d, want 401", code)
		}
	}
	if code, msg, _ := sign("GET", "/v1/nodes", nil, key).send(h); code != http.StatusOK {
		t.Fatalf("signed after forgeries: %d %s, want 200", code, msg)
	}
	code, msg, _ := sign("GET", "/v1/nodes", nil, key).send(h)
	if code != http.StatusServiceUnavailable || !strings.Contains(msg, "replay cache full") {
		t.Errorf("signed with the cache full: %d %q, want 503 replay cache full", code, msg)
	}
}

// TestARestartedCoordinatorRefusesWhatItsPredecessorMayHaveServed: its
// nonce cache starts empty, so a request signed before it started or in
// its first second — a register or a cancel its predecessor served,
// captured and sent again within the clock-skew window — is refused with
// 503 (clients retry, signing anew) and changes nothing; the same request
// signed in a later second passes.
func TestARestartedCoordinatorRefusesWhatItsPredecessorMayHaveServed(t *testing.T) {
	c, key := newSignedCoordinator(t)
	h := c.Handler()
	regBody, _ := json.Marshal(newFakeNode("cpu-a", "cpu", 2, 7001).req)
	captured := signAt("POST", "/v1/nodes/register", regBody, key, c.started.Add(-time.Second))
	code, msg, _ := captured.send(h)
	if code != http.StatusServiceUnavailable || !strings.Contains(msg, "signed before the coordinator started") {
		t.Errorf("a register signed before the start: %d %q, want 503 signed before the coordinator started", code, msg)
	}
	c.mu.Lock()
	nodes := len(c.nodes)
	c.mu.Unlock()
	if nodes != 0 {
		t.Errorf("the refused register added %d node(s)", nodes)
	}
	sameSecond := signAt("POST", "/v1/nodes/register", regBody, key, c.started.Truncate(time.Second))
	if code, msg, _ := sameSecond.send(h); code != http.StatusServiceUnavailable {
		t.Errorf("a register signed in the second the coordinator started: %d %q, want 503", code, msg)
	}
	next := signAt("POST", "/v1/nodes/register", regBody, key, c.started.Truncate(time.Second).Add(time.Second))
	if code, msg, _ := next.send(h); code != http.StatusOK {
		t.Errorf("the same register signed in the next second: %d %q, want 200", code, msg)
	}
}
