package coord

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// httpError is an error with the HTTP status it is answered with.
type httpError struct {
	status int
	msg    string
	later  bool // the same request may succeed in a few heartbeats (tryAgain)
}

func (e *httpError) Error() string { return e.msg }

// tryAgain is a 409 that the same request may not meet in a few
// heartbeats: the message ends by saying so.
func tryAgain(format string, args ...any) error {
	return &httpError{status: http.StatusConflict, msg: fmt.Sprintf(format, args...) + "; try again in a few heartbeats", later: true}
}

// isTryAgain reports whether err is a tryAgain refusal.
func isTryAgain(err error) bool {
	var he *httpError
	return errors.As(err, &he) && he.later
}

func httpErrorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return httpErrorf(http.StatusBadRequest, format, args...)
}

// Handler is the coordinator's HTTP API (package api documents it).
func (c *Coordinator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/nodes/register", c.handleRegister)
	mux.HandleFunc("POST /v1/nodes/{id}/heartbeat", c.handleHeartbeat)
	mux.HandleFunc("GET /v1/nodes", c.handleNodes)
	mux.HandleFunc("POST /v1/nodes/{id}/throttle", c.handleThrottle)
	mux.HandleFunc("POST /v1/nodes/{id}/drain", c.handleDrain)
	mux.HandleFunc("POST /v1/jobs", c.handleSubmit)
	mux.HandleFunc("GET /v1/jobs", c.handleJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", c.handleJob)
	mux.HandleFunc("DELETE /v1/jobs/{id}", c.handleCancel)
	mux.HandleFunc("PATCH /v1/jobs/{id}", c.handlePatch)
	mux.HandleFunc("POST /v1/jobs/{id}/checkpoint", c.handleAskCheckpoint)
	mux.HandleFunc("GET /v1/alloc", c.handleAlloc)
	mux.HandleFunc("PUT /v1/profiles/{model}", c.handlePutProfile)
	mux.HandleFunc("GET /v1/profiles", c.handleProfiles)
	mux.HandleFunc("DELETE /v1/profiles/{model}", c.handleDeleteProfiles)
	mux.HandleFunc("DELETE /v1/profiles/{model}/{type}", c.handleDeleteProfiles)
	if c.cfg.ControlSecret == nil {
		return mux
	}
	nonces := api.NewNonceCache(api.DefaultNonceCacheSize)
	nonces.RefuseSignedThrough(c.started) // what its predecessor served may come again
	return c.authenticated(mux, api.ControlKey(c.cfg.ControlSecret), nonces)
}

// authenticated serves only requests signed with key (api.Verify), each
// once: it reads the body (at most bodyLimit) and checks the
// signature before next decodes anything, then records the request's nonce
// (api.NonceCache) and refuses a repeat with 401. Nonces are recorded only
// after the MAC verified, so only holders of the secret can fill the cache;
// a full one answers 503 until old nonces expire.
func (c *Coordinator) authenticated(next http.Handler, key []byte, nonces *api.NonceCache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(w, r)
		if err != nil {
			writeError(w, err)
			return
		}
		now := time.Now()
		stamp, err := api.Verify(r, body, key, now)
		if err == nil {
			err = nonces.Seen(stamp, now)
		}
		if err != nil {
			c.log.Warn("coordinator: refused an unauthenticated request", "from", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "err", err)
			writeError(w, authError(w, err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// authError is the reply to a request authenticated refuses: 503 with
// Retry-After when the nonce cache is full or the request was signed
// before the coordinator started (clients retry, signing anew), else 401.
func authError(w http.ResponseWriter, err error) error {
	switch {
	case errors.Is(err, api.ErrNonceCacheFull):
		w.Header().Set("Retry-After", "10")
		return httpErrorf(http.StatusServiceUnavailable, "%v", err)
	case errors.Is(err, api.ErrSignedBeforeStart):
		w.Header().Set("Retry-After", "1")
		return httpErrorf(http.StatusServiceUnavailable, "%v", err)
	}
	w.Header().Set("WWW-Authenticate", api.AuthScheme)
	return httpErrorf(http.StatusUnauthorized, "%v", err)
}

func (c *Coordinator) handleRegister(w http.ResponseWriter, r *http.Request) {
	var req api.RegisterRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	resp, err := c.register(req)
	reply(w, http.StatusOK, resp, err)
}

func (c *Coordinator) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	var hb api.Heartbeat
	if err := decodeJSON(w, r, &hb); err != nil {
		writeError(w, err)
		return
	}
	resp, err := c.heartbeat(r.PathValue("id"), hb)
	if err == nil {
		resp.CPUShare = c.exchangeShare(r.PathValue("id"), hb)
	}
	reply(w, http.StatusOK, resp, err)
}

func (c *Coordinator) handleNodes(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	nodes := c.nodeStatuses()
	c.addShares(nodes)
	c.mu.Unlock()
	reply(w, http.StatusOK, nodes, nil)
}

func (c *Coordinator) handleThrottle(w http.ResponseWriter, r *http.Request) {
	var req api.ThrottleRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	s, err := c.throttle(r.Context(), r.PathValue("id"), req)
	reply(w, http.StatusOK, s, err)
}

func (c *Coordinator) handleDrain(w http.ResponseWriter, r *http.Request) {
	var req api.DrainRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	s, err := c.drain(r.Context(), r.PathValue("id"), req.Drain)
	reply(w, http.StatusOK, s, err)
}

func (c *Coordinator) handleSubmit(w http.ResponseWriter, r *http.Request) {
	src, ok := readTOMLBody(w, r)
	if !ok {
		return
	}
	key := r.Header.Get(api.IdempotencyKeyHeader)
	if key != "" {
		if err := api.CheckIdempotencyKey(key); err != nil {
			writeError(w, badRequest("%v", err))
			return
		}
	}
	file := jobFileName
	if q := r.URL.Query(); q.Has(api.JobFileParam) {
		file = q.Get(api.JobFileParam)
		if err := api.CheckJobFileName(file); err != nil {
			writeError(w, badRequest("%v", err))
			return
		}
	}
	j, _, err := c.submit(src, file, key)
	if err != nil {
		writeError(w, err)
		return
	}
	reply(w, http.StatusCreated, api.SubmitResponse{JobID: j.id}, nil)
}

func (c *Coordinator) handleJobs(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	c.mu.Lock()
	jobs := make([]api.JobStatus, 0, len(c.jobs))
	for _, j := range c.jobs {
		jobs = append(jobs, c.status(j, now))
	}
	c.mu.Unlock()
	reply(w, http.StatusOK, jobs, nil)
}

func (c *Coordinator) handleJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c.mu.Lock()
	j, err := c.knownJob(id)
	var s api.JobStatus
	if err == nil {
		s = c.status(j, time.Now())
	}
	c.mu.Unlock()
	reply(w, http.StatusOK, s, err)
}

func (c *Coordinator) handleCancel(w http.ResponseWriter, r *http.Request) {
	s, err := c.cancel(r.PathValue("id"))
	reply(w, http.StatusOK, s, err)
}

func (c *Coordinator) handleAskCheckpoint(w http.ResponseWriter, r *http.Request) {
	s, err := c.askCheckpoint(r.PathValue("id"), time.Now())
	reply(w, http.StatusOK, s, err)
}

func (c *Coordinator) handlePatch(w http.ResponseWriter, r *http.Request) {
	var req api.ResizeRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	s, err := c.patch(r.PathValue("id"), req)
	reply(w, http.StatusOK, s, err)
}

// wantContentType checks the request's media type.
func wantContentType(r *http.Request, want string) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" && want == api.ContentTypeJSON {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != want {
		return httpErrorf(http.StatusUnsupportedMediaType, "Content-Type %q: want %s", ct, want)
	}
	return nil
}

// bodyLimit is the most a request's body may hold: api.MaxProfileBytes
// for a profile, api.MaxBodyBytes for everything else.
func bodyLimit(r *http.Request) int64 {
	if r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/profiles/") {
		return api.MaxProfileBytes
	}
	return api.MaxBodyBytes
}

// readBody reads a body of at most bodyLimit bytes.
// readTOMLBody reads a TOML request body within the route's limit; on a
// wrong media type or a failed read it answers the error itself and
// returns false.
func readTOMLBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if err := wantContentType(r, api.ContentTypeTOML); err != nil {
		writeError(w, err)
		return nil, false
	}
	src, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return src, true
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	limit := bodyLimit(r)
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, httpErrorf(http.StatusRequestEntityTooLarge, "body over %d bytes", limit)
	}
	if err != nil {
		return nil, badRequest("reading the body: %v", err)
	}
	return b, nil
}

// decodeJSON decodes a JSON body strictly: one value, no unknown fields.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if err := wantContentType(r, api.ContentTypeJSON); err != nil {
		return err
	}
	b, err := readBody(w, r)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("bad JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("bad JSON body: data after the value")
	}
	return nil
}

func reply(w http.ResponseWriter, status int, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, status, v)
}

func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var he *httpError
	if errors.As(err, &he) {
		status = he.status
	}
	writeJSON(w, status, api.Error{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.Error{Error: "encoding the reply: " + err.Error()})
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
