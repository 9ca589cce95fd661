package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/alloc"
	"github.com/heterps/heterps/daemon/api"
)

// jobKind is a small zoo job: some 5-15 s on a whole node of a loaded
// 2-core machine.
type jobKind struct {
	name, model, data string
	batch, steps      int
}

var kinds = []jobKind{
	{name: "ctrdnn", model: "ctrdnn", data: "synthetic:1", batch: 128, steps: 300},
	{name: "mlp-digits", model: "mlp-digits", data: "digits:daemon/data/testdata/digits.csv.gz", batch: 512, steps: 1200},
	{name: "linreg", model: "linreg", data: "regress:1", batch: 8192, steps: 2000},
	{name: "nce", model: "nce", data: "words:1", batch: 2048, steps: 600},
}

// streamJob is one job of the stream: its kind and arrival.
type streamJob struct {
	name    string
	kind    jobKind
	arrival time.Duration
	seed    uint64
}

// newStream draws the seeded Poisson stream.
func newStream(o options) ([]streamJob, error) {
	r := rand.New(rand.NewPCG(o.seed, 0x3a1b))
	var out []streamJob
	var t time.Duration
	for i := range o.jobs {
		t += time.Duration(r.ExpFloat64() * float64(o.arrivalMean))
		k := kinds[r.IntN(len(kinds))]
		out = append(out, streamJob{name: fmt.Sprintf("%s-%02d", k.name, i), kind: k, arrival: t, seed: uint64(i + 1)})
	}
	return out, nil
}

// jobFile is the job's file, tracing into traces.
func (j streamJob) jobFile(traces string) ([]byte, error) {
	data := j.kind.data
	if path, ok := strings.CutPrefix(data, "digits:"); ok {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		data = "digits:" + abs
	}
	return fmt.Appendf(nil, "version = 1\nname = %q\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nseed = %d\ntrace = %q\n",
		j.name, j.kind.model, data, j.kind.batch, j.kind.steps, j.seed, filepath.Join(traces, j.name+".jsonl")), nil
}

// catalog is the run's catalog: local.toml's 1-thread CPU unit, as many
// as the nodes offer.
func catalog(o options) ([]byte, error) {
	base, err := config.LoadCatalog("config/examples/catalogs/local.toml")
	if err != nil {
		return nil, fmt.Errorf("run from the repository root: %w", err)
	}
	unit, ok := base.Type("cpu-1t")
	if !ok {
		return nil, fmt.Errorf("local.toml has no cpu-1t")
	}
	cat := loopback.Catalog("multijob", unit, o.nodes*o.units)
	cat.Nodes = nil
	return cat.MarshalTOML()
}

// runPolicy runs the stream on a fresh cluster under policy p.
func runPolicy(ctx context.Context, o options, heterpsd, dir string, p alloc.Policy, stream []streamJob) (policyResult, error) {
	res := policyResult{policy: p}
	traces := filepath.Join(dir, "traces")
	if err := os.MkdirAll(traces, 0o755); err != nil {
		return res, err
	}
	cat, err := catalog(o)
	if err != nil {
		return res, err
	}
	shares := make([]float64, o.nodes)
	for i := range shares {
		shares[i] = 1
	}
	cl, err := loopback.Start(ctx, loopback.Options{Bin: heterpsd, Dir: dir, Type: "cpu-1t", Catalog: cat, Shares: shares, Units: o.units,
		CoordArgs: []string{"--alloc-policy", string(p), "--alloc-epoch", o.epoch.String(), "--heartbeat", o.heartbeat.String(),
			"--heartbeat-timeout", "10s"}})
	if err != nil {
		return res, err
	}
	defer cl.Close()
	recs, decisionMS, err := drive(ctx, o, cl, stream, traces)
	if err != nil {
		return res, err
	}
	var kept []jobRecord
	var schedule []simArrival
	for i, r := range recs {
		if r.finished == 0 {
			res.failed = append(res.failed, r.name)
			continue
		}
		if r.trace, err = readWholeTrace(ctx, filepath.Join(traces, r.name+".jsonl"), stream[i].kind.steps, 3*o.epoch); err != nil ||
			len(r.trace) < alloc.MinPoints {
			res.failed = append(res.failed, r.name+" (no trace)")
			continue
		}
		res.done++
		kept = append(kept, r)
		schedule = append(schedule, simArrival{Trace: r.name + ".jsonl", Arrival: r.arrival, Priority: 1})
	}
	res.real = computeMetrics(kept, o.epoch.Seconds())
	res.real.DecisionMsMax = decisionMS
	raw, err := json.Marshal(schedule)
	if err != nil {
		return res, err
	}
	return res, os.WriteFile(filepath.Join(traces, "arrivals.json"), raw, 0o644)
}

// simArrival is an entry of the simulator's arrivals.json.
type simArrival struct {
	Trace    string  `json:"trace"`
	Arrival  float64 `json:"arrival"`
	Priority float64 `json:"priority"`
}

// drive submits the stream at its arrival times and polls until every job
// is final or the timeout; it returns the jobs' records (without traces)
// and the slowest allocation decision seen.
func drive(ctx context.Context, o options, cl *loopback.Cluster, stream []streamJob, traces string) ([]jobRecord, float64, error) {
	start := time.Now()
	since := func(t time.Time) float64 { return t.Sub(start).Seconds() }
	recs := make([]jobRecord, len(stream))
	ids := make([]string, len(stream))
	next := 0
	var decisionMS float64
	deadline := start.Add(stream[len(stream)-1].arrival + o.timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		for next < len(stream) && time.Since(start) >= stream[next].arrival {
			j := stream[next]
			file, err := j.jobFile(traces)
			if err != nil {
				return nil, 0, err
			}
			id, err := cl.Submit(ctx, file)
			if err != nil {
				return nil, 0, fmt.Errorf("job %s: %w", j.name, err)
			}
			ids[next], recs[next] = id, jobRecord{name: j.name, kind: j.kind.name, arrival: since(time.Now())}
			next++
		}
		var jobs []api.JobStatus
		if err := cl.Call(ctx, "GET", "/v1/jobs", "", "", &jobs); err != nil {
			return nil, 0, err
		}
		final := 0
		for i := range next {
			k := slices.IndexFunc(jobs, func(s api.JobStatus) bool { return s.ID == ids[i] })
			if k < 0 {
				continue
			}
			s := jobs[k]
			if s.Started != nil {
				recs[i].started = since(*s.Started)
			}
			if s.State.Final() {
				final++
				if s.State == api.JobDone && s.Finished != nil {
					recs[i].finished = since(*s.Finished)
				}
			}
		}
		var d api.AllocStatus
		if err := cl.Call(ctx, "GET", "/v1/alloc", "", "", &d); err == nil {
			decisionMS = max(decisionMS, d.DecisionMS)
		}
		if final == len(stream) || time.Now().After(deadline) {
			return recs, decisionMS, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-tick.C:
		}
	}
}

// readWholeTrace reads a done job's trace once it reaches its last step:
// the coordinator writes a job's last lines at its next epoch.
func readWholeTrace(ctx context.Context, path string, steps int, wait time.Duration) ([]alloc.TraceLine, error) {
	deadline := time.Now().Add(wait)
	for {
		lines, err := readTrace(path)
		if err == nil && len(lines) > 0 && lines[len(lines)-1].Step == int64(steps) || time.Now().After(deadline) {
			return lines, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func readTrace(path string) ([]alloc.TraceLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return alloc.ReadTrace(path, f)
}

// simulateTraces runs heterps sim on a run's traces and arrivals.
func simulateTraces(ctx context.Context, heterps string, o options, traces string, p alloc.Policy) (metrics, error) {
	var m metrics
	cmd := exec.CommandContext(ctx, heterps, "sim", "--trace-dir", traces, "--cores", fmt.Sprint(o.nodes*o.units),
		"--max-units", fmt.Sprint(o.units), "--epoch", fmt.Sprint(o.epoch.Seconds()), "--refit-every", "1", "--policy", string(p), "--json")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return m, fmt.Errorf("heterps sim: %w: %s", err, ee.Stderr)
		}
		return m, fmt.Errorf("heterps sim: %w", err)
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return m, fmt.Errorf("heterps sim: %w", err)
	}
	return m, nil
}
