package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/apiclient"
	"github.com/heterps/heterps/daemon/retry"
	"github.com/heterps/heterps/daemon/wire"
)

func init() {
	registerStoppable("submit", "submit a job file to a running coordinator", runSubmit)
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
	job, err := readJob(f.job)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	c, err := f.coord.client()
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	defer c.close()
	c.retryFor(requestRetryFor, stderr)
	id, err := c.submit(ctx, job)
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
	c.retryFor(waitRetryFor, stderr)
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
		c.HTTP.Transport.(*http.Transport).TLSClientConfig = cfg
	}
	if f.secretFile != "" {
		secret, err := wire.LoadSecret(f.secretFile)
		if err != nil {
			return nil, err
		}
		c.Key = api.ControlKey(secret)
	}
	return c, nil
}

// coordClient is the CLI's client of the coordinator: the one shared with
// the nodes (apiclient), and the calls the commands make. stopCheckpoint,
// when > 0, is how long waitJob, interrupted, waits for a checkpoint it
// asks for before it cancels the job (stopCheckpointFirst).
type coordClient struct {
	*apiclient.Client
	stopCheckpoint time.Duration
}

func newCoordClient(base string) *coordClient {
	return &coordClient{Client: apiclient.New(base, &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second})}
}

func (c *coordClient) close() { c.HTTP.CloseIdleConnections() }

// How long submit and status keep retrying one request while the
// coordinator is unreachable (a restart takes seconds), and how long
// submit --wait rides out an outage while it follows a job.
const (
	requestRetryFor = 30 * time.Second
	waitRetryFor    = 10 * time.Minute
)

// cliRetry is the CLI's backoff: 100 ms growing to 5 s, with jitter.
var cliRetry = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// retryFor makes c retry a request that the coordinator could not take
// (apiclient.Unavailable) for giveUp, saying so on notices before each wait.
func (c *coordClient) retryFor(giveUp time.Duration, notices io.Writer) {
	c.Retry = cliRetry
	c.Retry.GiveUp = giveUp
	c.OnRetry = retryNotices(notices)
}

// retryNotices writes a line for each wait before a retry.
func retryNotices(w io.Writer) func(error, time.Duration) {
	return func(err error, wait time.Duration) {
		fmt.Fprintf(w, "heterps: %v; retrying in %s\n", err, wait.Round(time.Millisecond))
	}
}

// submit submits a job file under a fresh idempotency key, which every
// retry of this submission repeats, so that a coordinator that took a try
// whose reply was lost can answer the next with the same job.
func (c *coordClient) submit(ctx context.Context, job jobText) (string, error) {
	var r api.SubmitResponse
	path := "/v1/jobs"
	if api.CheckJobFileName(job.label) == nil { // else the coordinator's errors say job.toml
		path += "?" + url.Values{api.JobFileParam: {job.label}}.Encode()
	}
	err := c.Do(ctx, apiclient.Request{Method: http.MethodPost, Path: path, ContentType: api.ContentTypeTOML, Body: job.toml,
		IdempotencyKey: api.NewIdempotencyKey()}, &r)
	return r.JobID, err
}

// refusedSubmission reports whether err is a coordinator's refusal of a
// job file (a 4xx answer to its submission).
func refusedSubmission(err error) bool {
	var se *apiclient.StatusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Method == http.MethodPost && se.Route() == "/v1/jobs" && se.Code >= 400 && se.Code < 500
}

func (c *coordClient) job(ctx context.Context, id string) (api.JobStatus, error) {
	var s api.JobStatus
	err := c.Get(ctx, "/v1/jobs/"+url.PathEscape(id), &s)
	return s, err
}

func (c *coordClient) jobs(ctx context.Context) ([]api.JobStatus, error) {
	var s []api.JobStatus
	err := c.Get(ctx, "/v1/jobs", &s)
	return s, err
}

func (c *coordClient) nodes(ctx context.Context) ([]api.NodeStatus, error) {
	var s []api.NodeStatus
	err := c.Get(ctx, "/v1/nodes", &s)
	return s, err
}

// alloc returns the allocator's policy and last decision (GET /v1/alloc).
func (c *coordClient) alloc(ctx context.Context) (api.AllocStatus, error) {
	var a api.AllocStatus
	err := c.Get(ctx, "/v1/alloc", &a)
	return a, err
}

func (c *coordClient) cancel(ctx context.Context, id string) (api.JobStatus, error) {
	var s api.JobStatus
	err := c.Delete(ctx, "/v1/jobs/"+url.PathEscape(id), &s)
	return s, err
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
				c.stopCheckpointFirst(id, notices)
				cancelCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				cancelled, err := c.cancel(cancelCtx, id)
				cancel()
				if err != nil || cancelled.ID == "" {
					return s, fmt.Errorf("job %s: %w (cancelled it)", id, ctx.Err())
				}
				// What a new job resumes from: an interrupted `heterps launch`
				// (its allocation's walltime, say) takes its coordinator with it.
				return cancelled, fmt.Errorf("%w: %s", ctx.Err(), describeCancelled(id, cancelled))
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
