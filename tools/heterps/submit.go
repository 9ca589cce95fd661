package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/wire"
)

func init() {
	register("submit", "submit a job file to a running coordinator", func(args []string) int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return runSubmit(ctx, args, os.Stdout, os.Stderr)
	})
}

// defaultCoordinator is where submit and status look without --coordinator.
const defaultCoordinator = "http://127.0.0.1:7070"

// parseInterspersed parses fs's flags wherever they stand among args, so
// that `heterps run job.toml --nodes 2` works, and returns the other
// arguments in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

type submitFlags struct {
	job        string
	coord      coordFlags
	wait, json bool
}

func parseSubmitFlags(args []string, stderr io.Writer) (*submitFlags, error) {
	var f submitFlags
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.coord.add(fs)
	fs.BoolVar(&f.wait, "wait", false, "wait for the job to finish and print its status")
	fs.BoolVar(&f.json, "json", false, "print JSON: the job id, or with --wait the final status")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if len(rest) != 1 {
		return nil, errors.New("usage: heterps submit job.toml [--coordinator URL] [--secret-file F] [--wait] [--json]")
	}
	f.job = rest[0]
	return &f, nil
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseSubmitFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	_, src, err := readJob(f.job)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	c, err := f.coord.client()
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	defer c.close()
	c.retry = cliRetry(requestRetryFor, stderr)
	id, err := c.submit(ctx, src)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	if !f.wait {
		if f.json {
			return printJSON(stdout, stderr, api.SubmitResponse{JobID: id})
		}
		fmt.Fprintln(stdout, id)
		return exitOK
	}
	update, done := jobProgress(stderr)
	c.retry = cliRetry(waitRetryFor, stderr)
	s, err := c.waitJob(ctx, id, update, stderr)
	done()
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	return reportJob(stdout, stderr, s, f.json)
}

// coordClient calls the coordinator's HTTP API (package api).
// coordFlags are the flags that say how to reach a coordinator.
type coordFlags struct {
	url, secretFile        string
	tlsCert, tlsKey, tlsCA string
}

func (f *coordFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "coordinator", defaultCoordinator, "the coordinator: host:port or an http(s) URL")
	fs.StringVar(&f.secretFile, "secret-file", os.Getenv("HETERPS_SECRET_FILE"),
		"the cluster secret, to sign requests to a coordinator that requires it (default $HETERPS_SECRET_FILE)")
	fs.StringVar(&f.tlsCert, "tls-cert", os.Getenv("HETERPS_TLS_CERT"), "this client's certificate for a coordinator that serves mutual TLS (default $HETERPS_TLS_CERT)")
	fs.StringVar(&f.tlsKey, "tls-key", os.Getenv("HETERPS_TLS_KEY"), "the key of --tls-cert (default $HETERPS_TLS_KEY)")
	fs.StringVar(&f.tlsCA, "tls-ca", os.Getenv("HETERPS_TLS_CA"), "the cluster CA (default $HETERPS_TLS_CA)")
}

// client returns a client of the coordinator, signing with the secret if
// one is given.
func (f *coordFlags) client() (*coordClient, error) {
	addr := f.url
	if f.tlsCert != "" && !strings.Contains(addr, "://") {
		addr = "https://" + addr // host:port means https with a certificate
	}
	base, err := config.CoordinatorURL(addr)
	if err != nil {
		return nil, fmt.Errorf("--coordinator: %w", err)
	}
	c := newCoordClient(base)
	if f.tlsCert != "" || f.tlsKey != "" || f.tlsCA != "" {
		cfg, err := wire.LoadTLS(f.tlsCert, f.tlsKey, f.tlsCA)
		if err != nil {
			return nil, err
		}
		c.http.Transport.(*http.Transport).TLSClientConfig = cfg
	}
	if f.secretFile != "" {
		secret, err := wire.LoadSecret(f.secretFile)
		if err != nil {
			return nil, err
		}
		c.key = api.ControlKey(secret)
	}
	return c, nil
}

type coordClient struct {
	base  string
	http  *http.Client
	key   []byte      // api.ControlKey of the cluster secret; nil: unsigned requests
	retry retryPolicy // zero: no retries
}

func newCoordClient(base string) *coordClient {
	return &coordClient{base: strings.TrimSuffix(base, "/"),
		http: &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}}
}

func (c *coordClient) close() { c.http.CloseIdleConnections() }

// retryPolicy says how a coordClient retries a request that the
// coordinator could not take (unavailableError): waits from first doubling
// up to max, until the request has failed for giveUp.
type retryPolicy struct {
	first, max time.Duration
	giveUp     time.Duration // 0: no retries
	notices    io.Writer     // a line each time a wait starts
}

// How long submit and status keep retrying one request while the
// coordinator is unreachable (a restart takes seconds), and how long
// submit --wait rides out an outage while it follows a job.
const (
	requestRetryFor = 30 * time.Second
	waitRetryFor    = 10 * time.Minute
)

// cliRetry is the CLI's backoff: 100 ms doubling to 5 s, for giveUp.
func cliRetry(giveUp time.Duration, notices io.Writer) retryPolicy {
	return retryPolicy{first: 100 * time.Millisecond, max: 5 * time.Second, giveUp: giveUp, notices: notices}
}

// unavailableError is a failure that retrying may cure: the coordinator
// refused the connection (nothing was sent), answered 502, 503 or 504, or
// dropped the connection of a GET (which is safe to send again).
type unavailableError struct{ error }

func (e unavailableError) Unwrap() error { return e.error }

// request is one call of the coordinator's API.
type request struct {
	method, path, contentType string
	body                      []byte
	idempotencyKey            string // for a submission; the same for each try
}

// do sends a request and decodes the JSON reply into out; a non-2xx
// status becomes an error with the coordinator's message.
func (c *coordClient) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	return c.send(ctx, request{method: method, path: path, contentType: contentType, body: body}, out)
}

// send sends r, and again after a wait while the coordinator is
// unavailable and c.retry allows.
func (c *coordClient) send(ctx context.Context, r request, out any) error {
	var failingSince time.Time
	wait := c.retry.first
	for {
		err := c.sendOnce(ctx, r, out)
		var unavailable unavailableError
		if err == nil || c.retry.giveUp <= 0 || !errors.As(err, &unavailable) {
			return err
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		left := c.retry.giveUp - time.Since(failingSince)
		if left <= 0 {
			return fmt.Errorf("%w (gave up after retrying for %s)", err, c.retry.giveUp)
		}
		wait = min(wait, left)
		fmt.Fprintf(c.retry.notices, "heterps: %v; retrying in %s\n", err, wait.Round(time.Millisecond))
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("coordinator: %s %s: %w (while waiting to retry)", r.method, r.path, err)
		}
		wait = min(2*wait, c.retry.max)
	}
}

// sleep waits for d or until ctx ends, returning ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendOnce sends r once, signed afresh (a signature is good for one
// request only).
func (c *coordClient) sendOnce(ctx context.Context, r request, out any) error {
	req, err := http.NewRequestWithContext(ctx, r.method, c.base+r.path, bytes.NewReader(r.body))
	if err != nil {
		return err
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.idempotencyKey != "" {
		req.Header.Set(api.IdempotencyKeyHeader, r.idempotencyKey)
	}
	if c.key != nil {
		api.Sign(req, r.body, c.key, time.Now())
	}
	resp, err := c.http.Do(req)
	if err != nil {
		err = fmt.Errorf("coordinator: %w", err)
		if refused(err) || r.method == http.MethodGet && dropped(err) {
			err = unavailableError{err}
		}
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("coordinator: %s %s: %w", r.method, r.path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e api.Error
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		err := fmt.Errorf("coordinator: %s %s: %s: %s", r.method, r.path, resp.Status, msg)
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			err = unavailableError{err}
		}
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("coordinator: %s %s: %w", r.method, r.path, err)
	}
	return nil
}

// refused says the connection was refused: the request was not sent.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// dropped says the connection broke before a reply came.
func dropped(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// submit submits a job file under a fresh idempotency key, which every
// retry of this submission repeats, so that a coordinator that took a try
// whose reply was lost can answer the next with the same job.
func (c *coordClient) submit(ctx context.Context, jobTOML []byte) (string, error) {
	var r api.SubmitResponse
	err := c.send(ctx, request{method: http.MethodPost, path: "/v1/jobs", contentType: api.ContentTypeTOML, body: jobTOML,
		idempotencyKey: api.NewIdempotencyKey()}, &r)
	return r.JobID, err
}

func (c *coordClient) job(ctx context.Context, id string) (api.JobStatus, error) {
	var s api.JobStatus
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+id, "", nil, &s)
	return s, err
}

func (c *coordClient) jobs(ctx context.Context) ([]api.JobStatus, error) {
	var s []api.JobStatus
	err := c.do(ctx, http.MethodGet, "/v1/jobs", "", nil, &s)
	return s, err
}

func (c *coordClient) nodes(ctx context.Context) ([]api.NodeStatus, error) {
	var s []api.NodeStatus
	err := c.do(ctx, http.MethodGet, "/v1/nodes", "", nil, &s)
	return s, err
}

func (c *coordClient) cancel(ctx context.Context, id string) error {
	var s api.JobStatus
	return c.do(ctx, http.MethodDelete, "/v1/jobs/"+id, "", nil, &s)
}

// pollEvery is how often waitJob asks for the job's status.
const pollEvery = 250 * time.Millisecond

// waitJob polls job id until it is final, calling progress with each
// status; if ctx ends first it cancels the job. A job that failed and was
// restarted from its checkpoint is followed to its restart, with a line on
// notices.
func (c *coordClient) waitJob(ctx context.Context, id string, progress func(api.JobStatus), notices io.Writer) (api.JobStatus, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		s, err := c.job(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				cancelCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c.cancel(cancelCtx, id)
				cancel()
				return s, fmt.Errorf("job %s: %w (cancelled it)", id, ctx.Err())
			}
			return s, err
		}
		if s.State.Final() && s.RestartedAs != "" {
			fmt.Fprintf(notices, "\njob %s %s: %s; following job %s\n", s.ID, s.State, s.Reason, s.RestartedAs)
			id = s.RestartedAs
			continue
		}
		if s.State.Final() {
			return s, nil
		}
		progress(s)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return failTo(stderr, exitFailure, err)
	}
	return exitOK
}
