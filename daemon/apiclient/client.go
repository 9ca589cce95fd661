// Package apiclient is the one client of the coordinator's HTTP API
// (package api), shared by the node daemons and the CLI: JSON (or TOML)
// requests signed with the cluster's control key when there is one, the
// coordinator's errors decoded into StatusError, and retries, with the
// shared backoff (package retry), of the failures that retrying may cure.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/retry"
)

// MaxReply bounds a reply body: task lists carry model files.
const MaxReply = 64 << 20

// Client calls one coordinator. Set its fields before its first request.
type Client struct {
	// Base is the coordinator's URL (http or https), without a trailing slash.
	Base string
	// HTTP sends the requests; its transport carries the caller's TLS
	// configuration.
	HTTP *http.Client
	// Key is api.ControlKey of the cluster secret; nil: requests go unsigned.
	Key []byte
	// Retry spaces the tries of a request that failed as Unavailable; a
	// zero GiveUp sends each request once.
	Retry retry.Policy
	// OnRetry, if set, hears of each failure before the wait for the next try.
	OnRetry func(err error, wait time.Duration)
}

// New returns a client of the coordinator at base through hc, unsigned and
// without retries.
func New(base string, hc *http.Client) *Client {
	return &Client{Base: strings.TrimSuffix(base, "/"), HTTP: hc}
}

// Request is one call of the API.
type Request struct {
	Method, Path string
	ContentType  string // of Body; empty without one
	Body         []byte
	// IdempotencyKey, if set, marks every try of the request alike
	// (api.IdempotencyKeyHeader).
	IdempotencyKey string
}

// StatusError is a reply with a status other than 2xx: the coordinator's
// message (api.Error) or the start of its body.
type StatusError struct {
	Method, Path string
	Code         int
	Status       string // "404 Not Found"
	Message      string
}

// Route is the request's path without its query.
func (e *StatusError) Route() string {
	path, _, _ := strings.Cut(e.Path, "?")
	return path
}

// Error names the request by its route: the query says nothing the
// message does not (a job file's name, which its errors name).
func (e *StatusError) Error() string {
	return fmt.Sprintf("coordinator: %s %s: %s: %s", e.Method, e.Route(), e.Status, e.Message)
}

// UnavailableError is a failure that retrying may cure: the coordinator
// refused the connection (nothing was sent), answered 502, 503 or 504, or
// dropped the connection of a GET (which is safe to send again).
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable says err is an UnavailableError.
func Unavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// Get sends a GET of path and decodes the reply into out.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.Do(ctx, Request{Method: http.MethodGet, Path: path}, out)
}

// Delete sends a DELETE of path and decodes the reply into out.
func (c *Client) Delete(ctx context.Context, path string, out any) error {
	return c.Do(ctx, Request{Method: http.MethodDelete, Path: path}, out)
}

// PostJSON posts in as JSON to path and decodes the reply into out.
func (c *Client) PostJSON(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("coordinator: POST %s: %w", path, err)
	}
	return c.Do(ctx, Request{Method: http.MethodPost, Path: path, ContentType: api.ContentTypeJSON, Body: body}, out)
}

// Do sends r, and again after a wait while it fails as Unavailable and
// c.Retry allows, then decodes the JSON reply into out (unless nil).
func (c *Client) Do(ctx context.Context, r Request, out any) error {
	var backoff *retry.Backoff
	for {
		err := c.once(ctx, r, out)
		if err == nil || c.Retry.GiveUp <= 0 || !Unavailable(err) {
			return err
		}
		if backoff == nil {
			backoff = c.Retry.Start()
		}
		wait, ok := backoff.Next()
		if !ok {
			return fmt.Errorf("%w (gave up after retrying for %s)", err, c.Retry.GiveUp)
		}
		if c.OnRetry != nil {
			c.OnRetry(err, wait)
		}
		if err := retry.Sleep(ctx, wait); err != nil {
			return fmt.Errorf("coordinator: %s %s: %w (while waiting to retry)", r.Method, r.Path, err)
		}
	}
}

// once sends r once, signed afresh (a signature is good for one request
// only).
func (c *Client) once(ctx context.Context, r Request, out any) error {
	req, err := http.NewRequestWithContext(ctx, r.Method, c.Base+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if r.ContentType != "" {
		req.Header.Set("Content-Type", r.ContentType)
	}
	if r.IdempotencyKey != "" {
		req.Header.Set(api.IdempotencyKeyHeader, r.IdempotencyKey)
	}
	if c.Key != nil {
		api.Sign(req, r.Body, c.Key, time.Now())
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		err = fmt.Errorf("coordinator: %w", err)
		if refused(err) || r.Method == http.MethodGet && dropped(err) {
			err = &UnavailableError{err}
		}
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxReply+1))
	if err != nil {
		return fmt.Errorf("coordinator: %s %s: reply: %w", r.Method, r.Path, err)
	}
	if len(raw) > MaxReply {
		return fmt.Errorf("coordinator: %s %s: reply larger than %d MiB, not read (is %s a heterps coordinator?)", r.Method, r.Path, MaxReply>>20, c.Base)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(r, resp, raw)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("coordinator: %s %s: reply: %w", r.Method, r.Path, err)
	}
	return nil
}

// statusError is the error of a reply with a non-2xx status, unavailable
// for 502, 503 and 504.
func statusError(r Request, resp *http.Response, raw []byte) error {
	e := &StatusError{Method: r.Method, Path: r.Path, Code: resp.StatusCode, Status: resp.Status,
		Message: strings.TrimSpace(string(raw))}
	var body api.Error
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		e.Message = body.Error
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &UnavailableError{e}
	}
	return e
}

// refused says the connection was refused: the request was not sent.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// dropped says the connection broke before a reply came.
func dropped(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
