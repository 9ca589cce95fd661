package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/node"
)

// inProcess runs the job on a coordinator and n node daemons in this
// process, as `heterps run` does with child processes; all of them share
// this process's Go runtime.
func inProcess(ctx context.Context, cat *config.Catalog, job []byte, n int) (*outcome, error) {
	begin := time.Now()
	quiet := slog.New(slog.DiscardHandler)
	c, err := coord.New(coord.Config{Catalog: cat, HeartbeatInterval: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { c.Serve(ctx, ln) })
	url := "http://" + ln.Addr().String()
	for i := range n {
		a, err := node.New(node.Config{Name: fmt.Sprintf("node%d", i), Coordinator: url, Listen: "127.0.0.1:0",
			PSListen: "127.0.0.1:0", Type: cat.Types[0].Name, Units: 1, Threads: unitThreads(cat.Types[0].Name), Plain: true, Logger: quiet})
		if err != nil {
			return nil, err
		}
		wg.Go(func() { a.Run(ctx) })
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	if err := waitNodes(ctx, client, url, n); err != nil {
		return nil, err
	}
	var sub api.SubmitResponse
	if err := call(ctx, client, http.MethodPost, url+"/v1/jobs", api.ContentTypeTOML, string(job), &sub); err != nil {
		return nil, err
	}
	s, err := waitJob(ctx, client, url, sub.JobID)
	if err != nil {
		return nil, err
	}
	cancel()
	wg.Wait() // the daemons' shutdown is part of the run's wall time, as with heterps run
	return &outcome{samplesPerS: s.SamplesPerS, steps: s.Step, jobSeconds: s.Finished.Sub(*s.Started).Seconds(),
		wallSeconds: time.Since(begin).Seconds(), loss: s.Loss, stages: s.Stages}, nil
}

// unitThreads reads the threads of a CPU unit from its type name ("cpu-2t":
// 2), as `heterps run` starts its daemons; 1 for other names.
func unitThreads(typ string) int {
	if m := threadsSuffix.FindStringSubmatch(typ); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

var threadsSuffix = regexp.MustCompile(`-(\d+)t$`)

// waitJob polls the job until it is final and returns its status if done.
func waitJob(ctx context.Context, client *http.Client, url, id string) (api.JobStatus, error) {
	for {
		var s api.JobStatus
		if err := call(ctx, client, http.MethodGet, url+"/v1/jobs/"+id, "", "", &s); err != nil {
			return s, err
		}
		if s.State.Final() {
			if s.State != api.JobDone {
				return s, fmt.Errorf("job %s: %s", s.State, s.Reason)
			}
			return s, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitNodes(ctx context.Context, client *http.Client, url string, n int) error {
	for {
		var nodes []api.NodeStatus
		if err := call(ctx, client, http.MethodGet, url+"/v1/nodes", "", "", &nodes); err == nil && len(nodes) >= n {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %d nodes: %w", n, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
