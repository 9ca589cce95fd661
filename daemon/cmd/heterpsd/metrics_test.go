package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/syncbuf"
)

const patience = 60 * time.Second

// daemon is a heterpsd run in this process.
type daemon struct {
	out    syncbuf.Buffer
	status int
	done   chan struct{}
}

// startDaemon runs heterpsd with args until ctx ends; logs go to logs.
func startDaemon(ctx context.Context, wg *sync.WaitGroup, logs io.Writer, args ...string) *daemon {
	d := &daemon{done: make(chan struct{})}
	wg.Go(func() {
		defer close(d.done)
		d.status = run(ctx, args, &d.out, logs)
	})
	return d
}

// lines waits for the daemon's first n output lines.
func (d *daemon) lines(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		if lines := strings.Split(d.out.String(), "\n"); len(lines) > n {
			return lines[:n]
		}
		select {
		case <-d.done:
			t.Fatalf("the daemon exited %d after printing %q", d.status, d.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon printed %q, want %d lines", d.out.String(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metricsURL is the URL the daemon's second line gives.
func (d *daemon) metricsURL(t *testing.T) string {
	t.Helper()
	url, ok := strings.CutPrefix(d.lines(t, 2)[1], "metrics ")
	if !ok {
		t.Fatalf("second line %q, want the metrics URL", d.lines(t, 2)[1])
	}
	return url
}

var client = &http.Client{Transport: &http.Transport{}, Timeout: patience}

// get returns a GET's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers want.
func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		status, body := get(t, url)
		if status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q, want %d", url, status, body, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape parses a /metrics page with Prometheus' text parser.
func scrape(t *testing.T, metricsURL string) map[string]*dto.MetricFamily {
	t.Helper()
	status, body := get(t, metricsURL+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

// total adds up a family's values (counts, for histograms), over series
// whose job_id label is job ("": any).
func total(fams map[string]*dto.MetricFamily, name, job string) float64 {
	sum := 0.0
	for _, m := range fams[name].GetMetric() {
		if job != "" && !hasLabel(m, "job_id", job) {
			continue
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMetricsDuringALoopbackJob runs a coordinator and two nodes in this
// process with metrics listeners and JSON logs: a node is not ready until
// it has registered; pprof is served only with --pprof; scraped twice
// during a job, the coordinator's step and trained samples and the nodes'
// steps and samples move, and the PS latency histograms have counts; the
// log lines are JSON and name the job, stage and replica.
func TestMetricsDuringALoopbackJob(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var logs syncbuf.Buffer
	defer func() {
		cancel()
		wg.Wait()
		client.CloseIdleConnections()
	}()
	coordAddr := freePort(t) // the nodes start before the coordinator listens there
	nodeFile := func(name, typ string) string {
		return writeFile(t, name+".toml", fmt.Sprintf("name = %q\ncoordinator = \"http://%s\"\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = %q\nunits = 1\nplain = true\n",
			name, coordAddr, typ))
	}
	observed := []string{"--metrics-listen", "127.0.0.1:0", "--log-format", "json"}
	cpu := startDaemon(ctx, &wg, &logs, append([]string{"--role=node", "--config", nodeFile("a", "cpu")}, observed...)...)
	cpuURL := cpu.metricsURL(t)
	if status, body := get(t, cpuURL+"/readyz"); status != http.StatusServiceUnavailable || !strings.Contains(body, "not registered") {
		t.Errorf("/readyz of an unregistered node: %d %q, want 503 and the reason", status, body)
	}
	if status, _ := get(t, cpuURL+"/healthz"); status != http.StatusOK {
		t.Errorf("/healthz: %d", status)
	}
	if status, _ := get(t, cpuURL+"/debug/pprof/"); status != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", status)
	}

	co := startDaemon(ctx, &wg, &logs, append([]string{"--role=coordinator", "--catalog", "testdata/catalog.toml", "--listen", coordAddr,
		"--heartbeat", "50ms", "--state-dir", t.TempDir(), "--pprof"}, observed...)...)
	coURL := co.metricsURL(t)
	gpu := startDaemon(ctx, &wg, &logs, append([]string{"--role=node", "--config", nodeFile("b", "gpu")}, observed...)...)
	gpuURL := gpu.metricsURL(t)
	waitStatus(t, coURL+"/readyz", http.StatusOK)
	waitStatus(t, cpuURL+"/readyz", http.StatusOK)
	waitStatus(t, gpuURL+"/readyz", http.StatusOK)
	if status, body := get(t, coURL+"/debug/pprof/"); status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ with --pprof: %d", status)
	}

	model, err := filepath.Abs("testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprintf("version = 1\nname = \"tiny\"\nmodel = %q\ndata = \"synthetic:1\"\nbatch = 64\nsteps = 100000\nthroughput_limit = 1\nmethod = \"heuristic\"\nmode = \"bsp\"\nseed = 3\n", model)
	resp, err := client.Post("http://"+coordAddr+"/v1/jobs", api.ContentTypeTOML, strings.NewReader(job))
	if err != nil {
		t.Fatal(err)
	}
	var submitted api.SubmitResponse
	err = json.NewDecoder(resp.Body).Decode(&submitted)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	id := submitted.JobID

	first := waitScrape(t, coURL, func(f map[string]*dto.MetricFamily) bool { return total(f, "heterps_job_step", id) >= 1 })
	firstNodes := total(scrape(t, cpuURL), "heterps_node_steps_total", "") + total(scrape(t, gpuURL), "heterps_node_steps_total", "")
	step := total(first, "heterps_job_step", id)
	second := waitScrape(t, coURL, func(f map[string]*dto.MetricFamily) bool { return total(f, "heterps_job_step", id) >= step+5 })
	if a, b := total(first, "heterps_job_trained_samples_total", id), total(second, "heterps_job_trained_samples_total", id); !(b > a) {
		t.Errorf("trained samples did not move between scrapes: %v then %v", a, b)
	}
	nodes := []map[string]*dto.MetricFamily{scrape(t, cpuURL), scrape(t, gpuURL)}
	if got := total(nodes[0], "heterps_node_steps_total", "") + total(nodes[1], "heterps_node_steps_total", ""); !(got > firstNodes) {
		t.Errorf("node steps did not move between scrapes: %v then %v", firstNodes, got)
	}
	if pulls := total(nodes[0], "heterps_ps_request_duration_seconds", "") + total(nodes[1], "heterps_ps_request_duration_seconds", ""); pulls == 0 {
		t.Error("the PS latency histograms have no counts")
	}
	if total(nodes[0], "heterps_ps_shard_rows", id)+total(nodes[1], "heterps_ps_shard_rows", id) == 0 {
		t.Error("no shard rows for the job")
	}
	for _, name := range []string{"heterps_jobs", "heterps_node_heartbeat_age_seconds", "go_goroutines"} {
		if second[name] == nil {
			t.Errorf("the coordinator serves no %s", name)
		}
	}
	cancel()
	wg.Wait()
	for i, d := range []*daemon{cpu, co, gpu} {
		if d.status != exitOK {
			t.Errorf("daemon %d exited %d", i, d.status)
		}
	}
	checkJSONLogs(t, logs.String(), id)
}

// waitScrape scrapes url until ok holds.
func waitScrape(t *testing.T, url string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		f := scrape(t, url)
		if ok(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: condition not met within %v", url, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkJSONLogs checks that every log line is a JSON object and that the
// job's submission and a stage task's assignment name their ids.
func checkJSONLogs(t *testing.T, logs, job string) {
	t.Helper()
	var submitted, assigned bool
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON (%v): %s", err, line)
			continue
		}
		switch {
		case rec["msg"] == "job submitted" && rec["job"] == job:
			submitted = true
		case rec["msg"] == "task assigned" && rec["job"] == job && rec["role"] == "stage":
			_, stage := rec["stage"]
			_, replica := rec["replica"]
			assigned = assigned || (stage && replica && rec["node"] != nil)
		}
	}
	if !submitted || !assigned {
		t.Errorf("job %s: submission logged with its id %t, stage task assigned with job, stage, replica and node %t; logs:\n%s",
			job, submitted, assigned, logs)
	}
}

// TestLogFileAndFormat: --log-file appends JSON lines to a 0600 file;
// an unknown format is a usage error.
func TestLogFileAndFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heterpsd.log")
	if err := os.WriteFile(path, []byte("{\"earlier\":1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &flags{logLevel: "info", logFormat: logJSON, logFile: path}
	log, closeLog, err := newLogger(f, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "job", "j1")
	closeLog()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var rec map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &rec) != nil || rec["job"] != "j1" {
		t.Errorf("log file:\n%s", b)
	}
	fresh := filepath.Join(t.TempDir(), "new.log")
	f.logFile = fresh
	if _, closeLog, err = newLogger(f, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	closeLog()
	st, err := os.Stat(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("new log file: mode %v, want 0600", st.Mode().Perm())
	}
	var stderr bytes.Buffer
	if status := run(context.Background(), []string{"--role=node", "--config", "x", "--log-format", "xml"}, &bytes.Buffer{}, &stderr); status != exitUsage {
		t.Errorf("--log-format xml: status %d (%s), want %d", status, stderr.String(), exitUsage)
	}
}
