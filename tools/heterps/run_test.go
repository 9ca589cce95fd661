package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/internal/cpuset"
)

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	n := fs.Int("nodes", 0, "")
	j := fs.Bool("json", false, "")
	rest, err := parseInterspersed(fs, []string{"--json", "job.toml", "--nodes", "4", "more"})
	if err != nil || *n != 4 || !*j || strings.Join(rest, " ") != "job.toml more" {
		t.Fatalf("rest %q nodes %d json %t err %v", rest, *n, *j, err)
	}
}

func TestNodeOffers(t *testing.T) {
	cat, err := config.LoadCatalog("../../config/examples/catalogs/local.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := nodeOffers(cat, 0)
	want := []offer{{name: "local-0.cpu-1t", typ: "cpu-1t", units: 1, threads: 1}, {name: "local-0.cpu-2t", typ: "cpu-2t", units: 1, threads: 2},
		{name: "local-1.cpu-1t", typ: "cpu-1t", units: 1, threads: 1}}
	if len(got) != len(want) {
		t.Fatalf("offers %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("offer %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	four := nodeOffers(cat, 4)
	if len(four) != 4 || four[3].typ != "cpu-1t" || four[3].name != "node3.cpu-1t" || four[1].threads != 2 {
		t.Errorf("--nodes 4: %+v", four)
	}
	cat.Nodes = nil
	if bare := nodeOffers(cat, 0); len(bare) != 2 || bare[0].units != 1 || bare[1].typ != "cpu-2t" {
		t.Errorf("no [[node]]: %+v", bare)
	}
}

// TestNodeOffersOfAGPUType: heterps run starts one daemon per GPU of a GPU
// type (a stage task runs on one GPU), each naming its own GPU of this
// machine, numbered across the catalog's nodes (a node of a GPU type
// without GPUs is refused at registration), unless the catalog emulates
// its GPUs on CPUs: then one daemon with all the units and no GPUs.
func TestNodeOffersOfAGPUType(t *testing.T) {
	const src = `version = 1
name = "gpu-check"
%s
[[type]]
name = "cpu"
kind = "cpu"
model = "cores"
price = 0.04
max_units = 8
peak_flops = 1.0e11
mem_bandwidth = 2.0e10
link_bandwidth = 5.0e9
[[type]]
name = "h200"
kind = "gpu"
model = "H200"
price = 4.0
max_units = 3
peak_flops = 6.0e13
mem_bandwidth = 4.8e12
link_bandwidth = 5.0e9
[[node]]
name = "local"
address = "127.0.0.1:7071"
units = { cpu = 8, h200 = 2 }
[[node]]
name = "other"
address = "127.0.0.1:7072"
units = { h200 = 1 }
`
	for _, tc := range []struct {
		emulate string
		want    map[string]string // daemon name: its gpus line
	}{
		{"", map[string]string{"local.h200.gpu0": "gpus = [0]\n", "local.h200.gpu1": "gpus = [1]\n", "other.h200.gpu2": "gpus = [2]\n"}},
		{"emulate_gpus = true", map[string]string{"local.h200": "", "other.h200": ""}},
	} {
		cat, err := config.ParseCatalog("gpu.toml", []byte(fmt.Sprintf(src, tc.emulate)))
		if err != nil {
			t.Fatal(err)
		}
		offers := nodeOffers(cat, 0)
		if len(offers) != 1+len(tc.want) || offers[0].typ != "cpu" {
			t.Fatalf("%q: offers %+v", tc.emulate, offers)
		}
		if cpu := string(nodeFile(offers[0], "http://c")); strings.Contains(cpu, "gpus") {
			t.Errorf("%q: the cpu daemon's file names GPUs:\n%s", tc.emulate, cpu)
		}
		for _, o := range offers[1:] {
			line, ok := tc.want[o.name]
			file := string(nodeFile(o, "http://c"))
			if !ok || strings.Contains(file, "gpus") != (line != "") || !strings.Contains(file, line) {
				t.Errorf("%q: daemon %s's file\n%s\nwant %q", tc.emulate, o.name, file, line)
			}
			n, err := config.ParseNode("n.toml", []byte(file))
			if err != nil {
				t.Errorf("%q: %s's file does not parse: %v", tc.emulate, o.name, err)
			} else if line != "" && n.Units != 1 {
				t.Errorf("%q: %s offers %d units, want its one GPU", tc.emulate, o.name, n.Units)
			}
		}
	}
}

// finishedStatus is a done two-stage job as the coordinator reports it.
func finishedStatus(t *testing.T) api.JobStatus {
	t.Helper()
	plan := sched.Plan{Method: "heuristic", Feasible: true, Cost: 0.5, Throughput: 1000,
		Stages: []sched.Stage{{First: 0, Last: 0, Type: "cpu", Units: 1, Throughput: 1000}, {First: 1, Last: 3, Type: "gpu", Units: 2, Throughput: 4000}}}
	raw, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(90 * time.Second)
	return api.JobStatus{ID: "j7", Name: "tiny", State: api.JobDone, Plan: raw, Step: 20, Steps: 20, Loss: 0.5,
		SamplesPerS: 800, CostSoFar: 0.01, PS: []string{"a"}, Started: &start, Finished: &end,
		Stages: []api.StageStatus{
			{Stage: 0, Type: "cpu", Units: 1, FirstLayer: 0, LastLayer: 0, Nodes: []string{"a"}, PredictedThroughput: 1000, MeasuredThroughput: 800},
			{Stage: 1, Type: "gpu", Units: 2, FirstLayer: 1, LastLayer: 3, Nodes: []string{"b", "c"}, PredictedThroughput: 4000, MeasuredThroughput: 900},
		}}
}

func TestRunJSONFromStatus(t *testing.T) {
	var out, errb bytes.Buffer
	if code := reportJob(&out, &errb, finishedStatus(t), true); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"job", "steps", "loss", "samples_per_s", "cost", "stages"} {
		if _, ok := r[key]; !ok {
			t.Errorf("no %q in %s", key, out.String())
		}
	}
	var res runResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Job != "j7" || res.Steps != 20 || res.Seconds != 90 || res.Predicted != 1000 || res.PlanCost != 0.5 || len(res.Stages) != 2 {
		t.Fatalf("result %+v", res)
	}
	st := res.Stages[1]
	if st.Type != "gpu" || st.Units != 2 || len(st.Nodes) != 2 || st.PredictedThroughput != 4000 || st.MeasuredThroughput != 900 {
		t.Errorf("stage 1: %+v", st)
	}
}

func TestReportJobExitStatus(t *testing.T) {
	s := finishedStatus(t)
	var out bytes.Buffer
	if code := reportJob(&out, &out, s, false); code != exitOK || !strings.Contains(out.String(), "0.225") {
		t.Errorf("done: exit %d, output lacks stage 1's ratio 900/4000:\n%s", code, out.String())
	}
	s.State, s.Reason = api.JobFailed, "no feasible plan (method exact): too slow"
	if code := reportJob(&out, &out, s, false); code != exitInfeasible {
		t.Errorf("infeasible: exit %d", code)
	}
	s.Reason = "task j7.s0.r0 failed"
	if code := reportJob(&out, &out, s, true); code != exitFailure {
		t.Errorf("failed: exit %d", code)
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{{}, {"a.toml", "b.toml"}, {"--nodes", "-1", "job.toml"}, {"no-such-job.toml"}} {
		var out, errb bytes.Buffer
		if code := runRun(context.Background(), args, &out, &errb); code != exitUsage {
			t.Errorf("%q: exit %d (%s), want %d", args, code, errb.String(), exitUsage)
		}
	}
}

// heterps run starts each node daemon as a process here: more than
// maxLocalDaemons, asked for or listed by the catalog, is refused before
// anything starts (10^12 used to be allocated as offers until memory ran
// out), naming the bound.
func TestRunRefusesMoreDaemonsThanOneMachineRuns(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runRun(context.Background(), []string{"--nodes", "1000000000000", "ctrdnn-local"}, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), "--nodes 1000000000000: want 0..256") {
		t.Errorf("--nodes 10^12: exit %d (%s), want %d naming the bound", code, errb.String(), exitUsage)
	}
	var cat strings.Builder
	cat.WriteString("version = 1\nname = \"big\"\n[[type]]\nname = \"cpu\"\nkind = \"cpu\"\nprice = 0.04\nmax_units = 300\npeak_flops = 1e11\nmem_bandwidth = 1e10\nlink_bandwidth = 1e9\n")
	for i := range maxLocalDaemons + 1 {
		fmt.Fprintf(&cat, "[[node]]\nname = \"n%d\"\naddress = \"127.0.0.1:%d\"\nunits = { cpu = 1 }\n", i, 20000+i)
	}
	path := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(path, []byte(cat.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code := runRun(context.Background(), []string{"--catalog", path, "--heterpsd", os.Args[0], "ctrdnn-local"}, &out, &errb)
	if code != exitUsage || !strings.Contains(errb.String(), "its offers make 257 node daemons, want at most 256") {
		t.Errorf("a catalog of 257 nodes: exit %d (%s), want %d naming the bound", code, errb.String(), exitUsage)
	}
}

// TestRunReportsADaemonThatDies: a daemon binary that exits at once is
// reported with the reason it gave, not waited for.
func TestRunReportsADaemonThatDies(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh(1)")
	}
	dying := filepath.Join(t.TempDir(), "heterpsd")
	const reason = "heterpsd: listen 127.0.0.1:7070: address already in use"
	if err := os.WriteFile(dying, []byte("#!/bin/sh\necho '"+reason+"' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := runRun(context.Background(), []string{"../../config/examples/jobs/ctrdnn-local.toml", "--catalog",
		"../../config/examples/catalogs/local.toml", "--heterpsd", dying, "--log-dir", t.TempDir()}, &out, &errb)
	if code != exitFailure || !strings.Contains(errb.String(), "exited before serving: "+reason) {
		t.Errorf("exit %d, stderr %s", code, errb.String())
	}
}

// TestRunTinyJobJSON runs `heterps run --json` for real: a coordinator and
// two node daemons as child processes (heterpsd, built here), the tiny
// two-stage job of daemon/node's tests.
func TestRunTinyJobJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("builds heterpsd and runs daemons")
	}
	bin, jobPath, src, catalog := tinyJob(t, 20)
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	logs := t.TempDir()
	code := runRun(context.Background(), []string{jobPath, "--catalog", catalog,
		"--heterpsd", bin, "--json", "--timeout", "2m", "--heartbeat", "50ms", "--log-dir", logs}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	var r runResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if r.State != api.JobDone || r.Steps != 20 || !(r.Loss > 0) || !(r.SamplesPerS > 0) || !(r.Cost > 0) || len(r.Stages) != 2 {
		t.Fatalf("result %+v", r)
	}
	for _, st := range r.Stages {
		if len(st.Nodes) != 1 || !(st.MeasuredThroughput > 0) || !(st.PredictedThroughput > 0) {
			t.Errorf("stage %+v", st)
		}
	}
	checkPinned(t, logs, 2)

	// A job file the coordinator refuses is named with its line, and its
	// run leaves no log directory behind: the job never ran.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	refused := strings.Replace(src, `method = "heuristic"`, `method = "nosuch"`, 1)
	if err := os.WriteFile(jobPath, []byte(refused), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	code = runRun(context.Background(), []string{jobPath, "--catalog", catalog, "--heterpsd", bin, "--timeout", "2m"}, &out, &errb)
	at := strings.Count(refused[:strings.Index(refused, "method =")], "\n") + 1 // the author's line, though the model's path was rewritten
	want := fmt.Sprintf("%s:%d:1: method: unknown method", jobPath, at)
	if code == exitOK || !strings.Contains(errb.String(), want) {
		t.Fatalf("refused job: exit %d, stderr %s, want %q", code, errb.String(), want)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 || strings.Contains(errb.String(), "daemon logs in") {
		t.Errorf("a refused job left %d entries in TMPDIR and said %q", len(left), errb.String())
	}
}

// tinyJob builds heterpsd and writes daemon/node's tiny two-stage job
// for steps steps into a directory of its own, beside its model, which it
// names relative to itself (heterps runs elsewhere: the path resolves
// against the job file). It returns the binary, the job file, its text
// and the catalog.
func tinyJob(t *testing.T, steps int) (bin, jobPath, src, catalog string) {
	t.Helper()
	bin = filepath.Join(t.TempDir(), "heterpsd")
	if out, err := exec.Command("go", "build", "-o", bin, "../../daemon/cmd/heterpsd").CombinedOutput(); err != nil {
		t.Fatalf("build heterpsd: %v\n%s", err, out)
	}
	job, err := os.ReadFile("../../daemon/node/testdata/job.toml")
	if err != nil {
		t.Fatal(err)
	}
	model, err := os.ReadFile("../../daemon/node/testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	if catalog, err = filepath.Abs("../../daemon/node/testdata/catalog.toml"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	jobPath = filepath.Join(dir, "job.toml")
	src = strings.Replace(string(job), `"testdata/tiny.toml"`, `"tiny.toml"`, 1)
	src = strings.Replace(src, "steps = 20", fmt.Sprintf("steps = %d", steps), 1)
	writeFile(t, jobPath, src, 0o600)
	writeFile(t, filepath.Join(dir, "tiny.toml"), string(model), 0o600)
	return bin, jobPath, src, catalog
}

// lineWith returns the first line of text that contains s.
func lineWith(text, s string) (string, bool) {
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) {
			return line, true
		}
	}
	return "", false
}

// checkPinned checks that a run's n one-thread node daemons, which fit
// this machine's CPUs when it has n or more, were each pinned to a CPU of
// its own and said so in its log.
func checkPinned(t *testing.T, logs string, n int) {
	t.Helper()
	allowed, _ := cpuset.Allowed()
	if len(allowed) < n {
		t.Logf("%d CPUs: the %d node daemons are not pinned", len(allowed), n)
		return
	}
	files, _ := filepath.Glob(filepath.Join(logs, "*.toml"))
	seen, hosts := map[string]bool{}, 0
	for _, f := range files {
		src, _ := os.ReadFile(f)
		n, err := config.ParseNode(f, src)
		if err != nil {
			t.Fatal(err)
		}
		if len(n.CPUList()) != 1 || seen[n.CPUs] {
			t.Errorf("%s: cpus %q, want a CPU of its own", f, n.CPUs)
		}
		seen[n.CPUs] = true
		log, _ := os.ReadFile(strings.TrimSuffix(f, ".toml") + ".log")
		if !strings.Contains(string(log), "pinned to CPUs") {
			t.Errorf("%s: the daemon did not say it was pinned:\n%s", f, log)
		}
		if os.Getenv("GOMAXPROCS") != "" {
			continue
		}
		if !strings.Contains(string(log), "gomaxprocs=1") {
			t.Errorf("%s: a daemon pinned to one CPU runs its goroutines on 1 P:\n%s", f, log)
		}
		if line, ok := lineWith(string(log), "ps shards up"); ok {
			hosts++
			if !strings.Contains(line, "gomaxprocs=2") {
				t.Errorf("%s: a pinned daemon hosting a shard runs on 2 Ps (one for the goroutines serving others):\n%s", f, log)
			}
		}
	}
	if len(seen) != n {
		t.Errorf("%d node files pinned, want %d", len(seen), n)
	}
	if os.Getenv("GOMAXPROCS") == "" && hosts == 0 {
		t.Errorf("no daemon said it hosts the job's shards")
	}
}

// TestPinOffersGivesEachDaemonCoresOfItsOwn: as many CPUs as a daemon's
// threads, dealt in turn among those allowed and round again when they
// run out; none to a daemon that would cover them all.
func TestPinOffersGivesEachDaemonCoresOfItsOwn(t *testing.T) {
	one, two := offer{units: 1, threads: 1}, offer{units: 1, threads: 2}
	for _, c := range []struct {
		offers  []offer
		allowed []int
		want    []string
	}{
		{[]offer{one, one}, []int{0, 1}, []string{"0", "1"}},
		{[]offer{two, one}, []int{2, 3, 5, 8}, []string{"2-3", "5"}},
		{[]offer{{units: 2, threads: 2}}, []int{0, 1, 2, 3}, []string{""}},
		{[]offer{{units: 2, threads: 2}}, []int{0, 1, 2, 3, 4}, []string{"0-3"}},
		{[]offer{one, one, one, one}, []int{0, 1}, []string{"0", "1", "0", "1"}},
		{[]offer{two, one, one}, []int{0, 1, 2}, []string{"0-1", "2", "0"}},
		{[]offer{one, two}, []int{0, 1}, []string{"0", ""}},
		{[]offer{one}, []int{0}, []string{""}},
		{[]offer{one}, nil, []string{""}},
	} {
		if got := pinOffers(c.offers, c.allowed); !slices.Equal(got, c.want) {
			t.Errorf("%v on %v: %q, want %q", c.offers, c.allowed, got, c.want)
		}
	}
}

func TestReportShowsCheckpoints(t *testing.T) {
	s := finishedStatus(t)
	s.RestoredFrom = &api.CheckpointStatus{Step: 10, Dir: "/ck/a/step-0000000010"}
	s.Checkpoint = &api.CheckpointStatus{Step: 20, Dir: "/ck/b/step-0000000020"}
	s.CheckpointFailure = &api.CheckpointFailure{Step: 30, Node: "n0", Error: "write shard: no space left on device"}
	s.CheckpointFailures = 3
	s.CheckpointWriting = &api.CheckpointWriting{Step: 40, Bytes: 3 << 20}
	s.Loading = []string{"n1", "n2"}
	var out, errb bytes.Buffer
	reportJob(&out, &errb, s, false)
	for _, want := range []string{"restored from step 10: /ck/a/step-0000000010", "latest checkpoint: step 20 in /ck/b/step-0000000020",
		"checkpoint of step 30 NOT WRITTEN (n0): write shard: no space left on device", "checkpoint files not written so far: 3",
		"writing the checkpoint of step 40: 3.0 MiB so far", "parameter servers still loading the checkpoint on n1, n2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	reportJob(&out, &errb, s, true)
	var res runResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.RestoredFrom == nil || res.RestoredFrom.Step != 10 || res.Checkpoint == nil || res.Checkpoint.Step != 20 ||
		res.CheckpointFailure == nil || res.CheckpointFailure.Step != 30 || res.CheckpointFailures != 3 ||
		res.CheckpointWriting == nil || *res.CheckpointWriting != *s.CheckpointWriting || len(res.Loading) != 2 {
		t.Errorf("JSON restored_from %+v, checkpoint %+v", res.RestoredFrom, res.Checkpoint)
	}
}

// TestRunGivesUpOnAQueuedJob: on the cluster `heterps run` starts, a job
// that has to wait for units never runs: it is cancelled, with the
// coordinator's reason, instead of waited for.
func TestRunGivesUpOnAQueuedJob(t *testing.T) {
	var cancelled atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			cancelled.Store(true)
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		json.NewEncoder(w).Encode(api.JobStatus{ID: "j1", State: api.JobQueued, Reason: "waiting for units: no type fits"})
	}))
	defer srv.Close()
	c := newCoordClient(srv.URL)
	defer c.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := waitUnqueued(ctx, c, "j1", func(api.JobStatus) {}, io.Discard, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "no type fits") || ctx.Err() != nil {
		t.Fatalf("waitUnqueued: %v (ctx %v)", err, ctx.Err())
	}
	if !cancelled.Load() {
		t.Error("the queued job was not cancelled")
	}

	// While a node daemon is on its way back, a queued job is waited for.
	cancelled.Store(false)
	polls := 0
	returning := func() bool { polls++; return polls <= 3 }
	if _, err := waitUnqueued(ctx, c, "j1", func(api.JobStatus) {}, io.Discard, returning); err == nil || !cancelled.Load() {
		t.Fatalf("waitUnqueued once the node was back: %v, cancelled %v", err, cancelled.Load())
	}
	if polls != 4 {
		t.Errorf("the job was given up at poll %d, want 4: the first three came while a node was returning", polls)
	}
}

// TestLastLineIsTheDaemonsReason: heterps run quotes the last line of a
// daemon that exited, where heterpsd writes why it gave up.
func TestLastLineIsTheDaemonsReason(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := strings.Repeat("time=... level=INFO msg=step\n", 10000) + "heterpsd: refusing to register: no GPU\n\n"
	for _, tc := range []struct{ path, want string }{
		{write("log", "time=... msg=stopped\nheterpsd: refusing to register: no GPU\n"), "heterpsd: refusing to register: no GPU"},
		{write("long", long), "heterpsd: refusing to register: no GPU"},
		{write("empty", ""), "its log is empty"},
		{filepath.Join(dir, "missing"), "its log cannot be read"},
	} {
		if got := lastLine(tc.path); got != tc.want {
			t.Errorf("%s: %q, want %q", filepath.Base(tc.path), got, tc.want)
		}
	}
}

func TestReportShowsAJoiningGrow(t *testing.T) {
	s := finishedStatus(t)
	var out, errb bytes.Buffer
	reportJob(&out, &errb, s, false)
	if strings.Contains(out.String(), "join") {
		t.Errorf("a job with no grow under way says one joins:\n%s", out.String())
	}
	s.JoiningAt = 1301
	out.Reset()
	reportJob(&out, &errb, s, false)
	if want := "replicas added to stage 0 join it at step 1301"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
}
