package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/internal/syncbuf"
)

// Test timing: heartbeats every interval; a silent node is dead after
// hbTimeout; waits give up after patience (the race detector on two shared
// cores is slow).
const (
	interval  = 50 * time.Millisecond
	hbTimeout = 3 * time.Second
	patience  = 90 * time.Second
)

var quiet = slog.New(slog.DiscardHandler)

// cluster is a coordinator and node daemons in this process, on loopback.
type cluster struct {
	t      *testing.T
	secret []byte // the data plane's; nil = plain
	base   string
	client *http.Client
	ctx    context.Context
	wg     sync.WaitGroup
}

func startCluster(t *testing.T) *cluster { return startClusterOn(t, "testdata/catalog.toml", "") }

// startClusterOn starts a coordinator for catalog; with secretFile set the
// data plane is authenticated with the secret in it.
func startClusterOn(t *testing.T, catalog, secretFile string) *cluster {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
	cat, err := config.LoadCatalog(catalog)
	if err != nil {
		t.Fatal(err)
	}
	c, err := coord.New(coord.Config{Catalog: cat, HeartbeatInterval: interval, HeartbeatTimeout: hbTimeout,
		SecretFile: secretFile, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var secret []byte
	if secretFile != "" {
		if secret, err = wire.LoadSecret(secretFile); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := &cluster{t: t, secret: secret, base: "http://" + ln.Addr().String(), ctx: ctx,
		client: &http.Client{Transport: &http.Transport{}, Timeout: patience}}
	cl.wg.Go(func() { c.Serve(ctx, ln) })
	t.Cleanup(func() {
		cancel()
		cl.wg.Wait()
		cl.client.CloseIdleConnections()
	})
	return cl
}

// startNode runs a node daemon offering one unit of typ until the test
// ends or the returned function stops it.
func (cl *cluster) startNode(name, typ string) (stop func()) {
	cl.t.Helper()
	return cl.startNodeVia(name, typ, cl.base)
}

// startNodeVia starts a node that reaches the coordinator at url.
func (cl *cluster) startNodeVia(name, typ, url string) (stop func()) {
	cl.t.Helper()
	return cl.startNodeAdjusted(name, typ, url, nil)
}

// startNodeAdjusted starts a node whose Config adjust, if not nil, changes
// first.
func (cl *cluster) startNodeAdjusted(name, typ, url string, adjust func(*Config)) (stop func()) {
	cl.t.Helper()
	cfg := cl.onLoopback(Config{Name: name, Type: typ}, url)
	if adjust != nil {
		adjust(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(cl.ctx)
	done := make(chan struct{})
	cl.wg.Go(func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			cl.t.Errorf("node %s: %v", name, err)
		}
	})
	return func() { cancel(); <-done }
}

// onLoopback is cfg as the cluster's test nodes run: one unit, listening on
// loopback, reaching the coordinator at url with the cluster's secret.
func (cl *cluster) onLoopback(cfg Config, url string) Config {
	cfg.Coordinator, cfg.Listen, cfg.PSListen, cfg.Units = url, "127.0.0.1:0", "127.0.0.1:0", 1
	cfg.Secret, cfg.Plain, cfg.Logger = cl.secret, cl.secret == nil, quiet
	cfg.ReadyTimeout, cfg.StepTimeout = 30*time.Second, 30*time.Second
	return cfg
}

func (cl *cluster) do(method, path, contentType string, body []byte, out any) {
	cl.t.Helper()
	status, raw := cl.send(method, path, contentType, body)
	if status/100 != 2 {
		cl.t.Fatalf("%s %s: %d: %s", method, path, status, raw)
	}
	if err := json.Unmarshal([]byte(raw), out); err != nil {
		cl.t.Fatal(err)
	}
}

// post sends a POST and returns the status and body, whatever they are.
func (cl *cluster) post(path, contentType string, body []byte) (int, string) {
	cl.t.Helper()
	return cl.send(http.MethodPost, path, contentType, body)
}

func (cl *cluster) send(method, path, contentType string, body []byte) (int, string) {
	cl.t.Helper()
	req, err := http.NewRequest(method, cl.base+path, bytes.NewReader(body))
	if err != nil {
		cl.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := cl.client.Do(req)
	if err != nil {
		cl.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func (cl *cluster) submit(path string) string {
	cl.t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		cl.t.Fatal(err)
	}
	var resp api.SubmitResponse
	cl.do(http.MethodPost, "/v1/jobs", api.ContentTypeTOML, src, &resp)
	return resp.JobID
}

func (cl *cluster) job(id string) api.JobStatus {
	cl.t.Helper()
	var s api.JobStatus
	cl.do(http.MethodGet, "/v1/jobs/"+id, "", nil, &s)
	return s
}

// waitJob polls job id until until(status) or patience runs out.
func (cl *cluster) waitJob(id string, until func(api.JobStatus) bool) api.JobStatus {
	cl.t.Helper()
	deadline := time.Now().Add(patience)
	for {
		s := cl.job(id)
		if until(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNodes waits until n nodes are alive.
func (cl *cluster) waitNodes(n int) {
	cl.t.Helper()
	deadline := time.Now().Add(patience)
	for {
		var nodes []api.NodeStatus
		cl.do(http.MethodGet, "/v1/nodes", "", nil, &nodes)
		alive := 0
		for _, nd := range nodes {
			if nd.State == api.NodeAlive {
				alive++
			}
		}
		if alive >= n {
			return
		}
		if time.Now().After(deadline) {
			cl.t.Fatalf("%d of %d nodes alive after %v", alive, n, patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func final(s api.JobStatus) bool { return s.State.Final() }

// TestJobRunsToDone trains the tiny model for 20 steps on two node daemons
// (embedding stage and PS on the cpu node, FC stage on the gpu node): the
// job ends done with every step taken, a finite loss and a measured
// throughput for each stage.
func TestJobRunsToDone(t *testing.T) {
	cl := startCluster(t)
	cl.startNode("a", "cpu")
	cl.startNode("b", "gpu")
	cl.waitNodes(2)
	s := cl.waitJob(cl.submit("testdata/job.toml"), final)
	if s.State != api.JobDone {
		t.Fatalf("job %s: %s", s.State, s.Reason)
	}
	if s.Step != 20 || len(s.Stages) != 2 || !(s.Loss > 0) || math.IsInf(s.Loss, 0) {
		t.Errorf("step %d of %d, %d stages, loss %g", s.Step, s.Steps, len(s.Stages), s.Loss)
	}
	for _, st := range s.Stages {
		if !(st.MeasuredThroughput > 0) || len(st.Nodes) != 1 {
			t.Errorf("stage %d: measured %g samples/s on %v", st.Stage, st.MeasuredThroughput, st.Nodes)
		}
	}
}

// TestMicroBatchedJob runs the two-stage job with four micro-batches per
// step, so that the stages overlap: it trains every step to a finite loss.
func TestMicroBatchedJob(t *testing.T) {
	cl := startCluster(t)
	cl.startNode("a", "cpu")
	cl.startNode("b", "gpu")
	cl.waitNodes(2)
	s := cl.waitJob(cl.submit(jobVariant(t, "seed = 3", "seed = 3\nmicro_batches = 4")), final)
	if s.State != api.JobDone || s.Step != 20 || len(s.Stages) != 2 || !(s.Loss > 0) || math.IsInf(s.Loss, 0) {
		t.Fatalf("job %s (%s): step %d, %d stages, loss %g", s.State, s.Reason, s.Step, len(s.Stages), s.Loss)
	}
}

// TestDataParallelJob trains one stage as two replicas on two nodes, each
// reading its half of the data and pushing half the batch to the PS.
func TestDataParallelJob(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)
	s := cl.waitJob(cl.submit("testdata/dp-job.toml"), final)
	if s.State != api.JobDone {
		t.Fatalf("job %s: %s", s.State, s.Reason)
	}
	if s.Step != 20 || len(s.Stages) != 1 || len(s.Stages[0].Nodes) != 2 || !(s.Loss > 0) || math.IsInf(s.Loss, 0) {
		t.Errorf("step %d, stages %+v, loss %g", s.Step, s.Stages, s.Loss)
	}
}

// TestJobWithClusterSecret runs the two-stage job with an authenticated
// data plane: stage links and PS connections all pass the handshake.
func TestJobWithClusterSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl := startClusterOn(t, "testdata/catalog.toml", path)
	cl.startNode("a", "cpu")
	cl.startNode("b", "gpu")
	cl.waitNodes(2)
	if s := cl.waitJob(cl.submit("testdata/job.toml"), final); s.State != api.JobDone || s.Step != 20 {
		t.Fatalf("job %s (%s) at step %d", s.State, s.Reason, s.Step)
	}
}

// TestUnknownTypeEndsRun: a node offering a type the catalog lacks is
// refused, and Run says why instead of retrying forever.
func TestUnknownTypeEndsRun(t *testing.T) {
	cl := startCluster(t)
	a, err := New(Config{Name: "x", Coordinator: cl.base, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: "tpu", Units: 1, Plain: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(cl.ctx); err == nil || !strings.Contains(err.Error(), "not in the catalog") {
		t.Errorf("Run: %v, want the coordinator's refusal", err)
	}
}

// TestKilledNodeFailsJob stops the FC stage's node mid-job: the
// coordinator reports the job failed, naming the node, within the
// heartbeat timeout, and the other node's tasks stop (no goroutine leaks:
// startCluster checks).
func TestKilledNodeFailsJob(t *testing.T) {
	cl := startCluster(t)
	cl.startNode("a", "cpu")
	stopB := cl.startNode("b", "gpu")
	cl.waitNodes(2)
	id := cl.submit(longJob(t))
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 3 || s.State.Final() })
	if s.State != api.JobRunning {
		t.Fatalf("before the kill: job %s (%s), step %d", s.State, s.Reason, s.Step)
	}
	stopB()
	killed := time.Now()
	s = cl.waitJob(id, final)
	took := time.Since(killed)
	if s.State != api.JobFailed || !strings.Contains(s.Reason, "node b") {
		t.Fatalf("after the kill: job %s (%q)", s.State, s.Reason)
	}
	if took > hbTimeout+time.Second {
		t.Errorf("the job failed %v after the kill; the heartbeat timeout is %v", took, hbTimeout)
	}
	t.Logf("failed %v after the kill: %s", took.Round(time.Millisecond), s.Reason)
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd + "/" + path
}

// TestSilentNodeFailsJob cuts a node off from the coordinator mid-job (a
// proxy between them starts refusing its heartbeats, as if it had crashed
// without a word): the coordinator declares it dead once the heartbeat
// timeout has passed and fails the job with that reason. Once the cut
// heals, the node registers again.
func TestSilentNodeFailsJob(t *testing.T) {
	cl := startCluster(t)
	var cut atomic.Bool
	target, err := neturl.Parse(cl.base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cut.Load() {
			http.Error(w, "partitioned", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { // runs before the cluster stops; node b tolerates a vanished coordinator
		srv.Close()
		proxy.Transport.(*http.Transport).CloseIdleConnections()
	})
	cl.startNode("a", "cpu")
	cl.startNodeVia("b", "gpu", srv.URL)
	cl.waitNodes(2)
	id := cl.submit(longJob(t))
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 3 || s.State.Final() })
	if s.State != api.JobRunning {
		t.Fatalf("before the cut: job %s (%s), step %d", s.State, s.Reason, s.Step)
	}
	cut.Store(true)
	cutAt := time.Now()
	s = cl.waitJob(id, final)
	took := time.Since(cutAt)
	if s.State != api.JobFailed || !strings.Contains(s.Reason, "node b") || !strings.Contains(s.Reason, "missed heartbeats") {
		t.Fatalf("after the cut: job %s (%q)", s.State, s.Reason)
	}
	if took > hbTimeout+time.Second {
		t.Errorf("the job failed %v after the cut; the heartbeat timeout is %v", took, hbTimeout)
	}
	t.Logf("failed %v after the cut: %s", took.Round(time.Millisecond), s.Reason)

	// Reconnected, the node learns it was declared dead (410) and
	// registers again.
	cut.Store(false)
	deadline := time.Now().Add(patience)
	for {
		var nodes []api.NodeStatus
		cl.do(http.MethodGet, "/v1/nodes", "", nil, &nodes)
		alive := 0
		for _, nd := range nodes {
			if nd.Name == "b" && nd.State == api.NodeAlive {
				alive++
			}
		}
		if alive == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node b did not register again: %+v", nodes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// longJob writes the test job with 100000 steps (it runs until stopped).
func longJob(t *testing.T) string {
	t.Helper()
	return jobVariant(t, "steps = 20", "steps = 100000")
}

// jobVariant writes the test job with old replaced by new, the model's
// path made absolute, and returns its path.
func jobVariant(t *testing.T, old, new string) string {
	t.Helper()
	src, err := os.ReadFile("testdata/job.toml")
	if err != nil {
		t.Fatal(err)
	}
	job := strings.Replace(string(src), old, new, 1)
	job = strings.Replace(job, `"testdata/tiny.toml"`, fmt.Sprintf("%q", mustAbs(t, "testdata/tiny.toml")), 1)
	path := t.TempDir() + "/job.toml"
	if err := os.WriteFile(path, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestJobWritesCheckpoints: with the job's one PS shard on one node, the
// node writes a complete checkpoint every 7 steps and after the last.
func TestJobWritesCheckpoints(t *testing.T) {
	root := t.TempDir()
	cl := startCluster(t)
	cl.startNode("a", "cpu")
	cl.startNode("b", "gpu")
	cl.waitNodes(2)
	path := jobVariant(t, "seed = 3", fmt.Sprintf("seed = 3\n[checkpoint]\ndir = %q\nevery = 7", root))
	s := cl.waitJob(cl.submit(path), final)
	if s.State != api.JobDone {
		t.Fatalf("job %s: %s", s.State, s.Reason)
	}
	for _, step := range []int64{7, 14, 20} {
		var m ckpt.Manifest
		var err error
		// The last is written as the job ends: give it a moment.
		for range 100 {
			if m, err = ckpt.ReadManifest(ckpt.StepDir(root, step)); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || m.Step != step || m.JobID != s.ID || m.Shards != 1 || len(m.Files) != 1 {
			t.Errorf("step %d: manifest %+v (%v)", step, m, err)
		}
	}
}

// dpJob writes the data-parallel job with its PS split in two shards
// (ps_ratio 1 over two units) and extra appended.
func dpJob(t *testing.T, extra string) string { return dpJobOf(t, 20, extra) }

// dpJobOf is dpJob training steps steps.
func dpJobOf(t *testing.T, steps int, extra string) string {
	t.Helper()
	return writeJobFile(t, dpJobSource(t, steps)+"ps_ratio = 1.0\n"+extra)
}

// dpJobSource is testdata/dp-job.toml training steps steps, its model's
// path made absolute: one PS shard.
func dpJobSource(t *testing.T, steps int) string {
	t.Helper()
	src, err := os.ReadFile("testdata/dp-job.toml")
	if err != nil {
		t.Fatal(err)
	}
	job := strings.Replace(string(src), `"testdata/tiny.toml"`, fmt.Sprintf("%q", mustAbs(t, "testdata/tiny.toml")), 1)
	if !strings.Contains(job, "\nsteps = 20\n") {
		t.Fatal("testdata/dp-job.toml has no steps = 20")
	}
	return strings.Replace(job, "\nsteps = 20\n", fmt.Sprintf("\nsteps = %d\n", steps), 1)
}

// writeJobFile writes a job file of src into a temporary directory and
// returns its path.
func writeJobFile(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckpointAcrossNodesAndRestore: a job whose two PS shards sit on two
// nodes checkpoints every 5 steps (each node writes its shard's file, the
// coordinator the manifest) and reports the latest; a second job restored
// from step 10 trains steps 11-20 and ends with the same parameters, bit
// for bit, as the uninterrupted job.
func TestCheckpointAcrossNodesAndRestore(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)

	a := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", rootA))), final)
	if a.State != api.JobDone || a.Reason != "" {
		t.Fatalf("job %s: %s", a.State, a.Reason)
	}
	if len(a.PS) != 2 || a.PS[0] == a.PS[1] {
		t.Fatalf("PS shards on %v, want two nodes", a.PS)
	}
	if a.Checkpoint == nil || a.Checkpoint.Step != 20 || a.Checkpoint.Dir != ckpt.StepDir(rootA, 20) {
		t.Fatalf("latest checkpoint %+v, want step 20 in %s", a.Checkpoint, rootA)
	}
	for _, step := range []int64{5, 10, 15, 20} {
		m, err := ckpt.VerifyDir(ckpt.StepDir(rootA, step))
		if err != nil || m.Step != step || m.JobID != a.ID || m.Shards != 2 || len(m.Files) != 2 {
			t.Errorf("step %d: manifest %+v (%v)", step, m, err)
		}
	}

	b := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 10\nrestore = %q\n",
		rootB, ckpt.StepDir(rootA, 10)))), final)
	if b.State != api.JobDone || b.Step != 20 {
		t.Fatalf("restored job %s at step %d: %s", b.State, b.Step, b.Reason)
	}
	if b.RestoredFrom == nil || b.RestoredFrom.Step != 10 {
		t.Fatalf("restored from %+v, want step 10", b.RestoredFrom)
	}
	if _, err := os.Stat(ckpt.StepDir(rootB, 10)); !os.IsNotExist(err) {
		t.Errorf("the restored job wrote a checkpoint of step 10, which it did not train: %v", err)
	}
	for shard := range 2 {
		name := ps.FileName(shard, 2)
		sameTensors(t, filepath.Join(ckpt.StepDir(rootA, 20), name), filepath.Join(ckpt.StepDir(rootB, 20), name))
	}

	// The same from one PS shard (ps_ratio 0): the checkpoint is re-sharded.
	rootC := t.TempDir()
	src, err := os.ReadFile(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 10\nrestore = %q\n", rootC, ckpt.StepDir(rootA, 10))))
	if err != nil {
		t.Fatal(err)
	}
	oneShard := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(oneShard, []byte(strings.Replace(string(src), "ps_ratio = 1.0\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := cl.waitJob(cl.submit(oneShard), final)
	if c.State != api.JobDone || c.Step != 20 || len(c.PS) != 1 {
		t.Fatalf("re-sharded job %s at step %d on PS %v: %s", c.State, c.Step, c.PS, c.Reason)
	}
	two := readTensors(t, filepath.Join(ckpt.StepDir(rootA, 20), ps.FileName(0, 2)))
	maps.Copy(two, readTensors(t, filepath.Join(ckpt.StepDir(rootA, 20), ps.FileName(1, 2))))
	sameTensorMaps(t, "2 shards", two, "1 shard", readTensors(t, filepath.Join(ckpt.StepDir(rootC, 20), ps.FileName(0, 1))))
}

// TestARestoredJobWaitsForItsParameterServersToLoad: a job restored from
// a checkpoint that takes its PS nodes longer to load than a step may take
// (here 5 s against a step timeout of 2 s and a PS request timeout of
// 2 s: a large checkpoint on slow storage) waits for them, its status
// naming the nodes still loading, and trains to its last step, instead of
// failing its first pull.
func TestARestoredJobWaitsForItsParameterServersToLoad(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	short := func(c *Config) { c.ReadyTimeout, c.StepTimeout = time.Second, 2*time.Second }
	cl.startNodeAdjusted("a", "cpu", cl.base, short)
	cl.startNodeAdjusted("b", "cpu", cl.base, short)
	cl.waitNodes(2)
	a := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", rootA))), final)
	if a.State != api.JobDone {
		t.Fatalf("job %s: %s", a.State, a.Reason)
	}
	restore := restoreShard
	restoreShard = func(cfg ps.Config, dir string) (*ps.Shard, error) {
		time.Sleep(5 * time.Second)
		return restore(cfg, dir)
	}
	t.Cleanup(func() { restoreShard = restore })
	id := cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 10\nrestore = %q\n", rootB, ckpt.StepDir(rootA, 10))))
	b := cl.waitJob(id, func(s api.JobStatus) bool { return len(s.Loading) > 0 || s.State.Final() })
	if len(b.Loading) == 0 || b.Step != 10 {
		t.Errorf("while its PS shards load: loading %v at step %d, want the PS nodes at step 10", b.Loading, b.Step)
	}
	b = cl.waitJob(id, final)
	if b.State != api.JobDone || b.Step != 20 || b.RestoredFrom == nil || b.RestoredFrom.Step != 10 || len(b.Loading) != 0 {
		t.Fatalf("restored job %s at step %d (%s), restored from %+v", b.State, b.Step, b.Reason, b.RestoredFrom)
	}
}

// TestARestoredPipelinePassesOverItsDataWhileItGreets: a two-stage job
// on a data file restored from a checkpoint, whose stage 0 takes longer to
// pass over the trained batches (here 3 s: a large file) than stage 1
// waits to be greeted (1 s), trains to its last step: the pass runs while
// the stages greet and the parameter servers load.
func TestARestoredPipelinePassesOverItsDataWhileItGreets(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	cl := startCluster(t)
	short := func(c *Config) { c.ReadyTimeout = time.Second }
	cl.startNodeAdjusted("a", "cpu", cl.base, short)
	cl.startNodeAdjusted("b", "gpu", cl.base, short)
	cl.waitNodes(2)
	onFile := func(checkpoint string) string {
		src, err := os.ReadFile(jobVariant(t, `data = "synthetic:1"`, fmt.Sprintf("data = %q", "criteo:"+mustAbs(t, "../data/testdata/criteo_sample.csv"))))
		if err != nil {
			t.Fatal(err)
		}
		return writeJobFile(t, string(src)+"[checkpoint]\n"+checkpoint)
	}
	a := cl.waitJob(cl.submit(onFile(fmt.Sprintf("dir = %q\nevery = 5\n", rootA))), final)
	if a.State != api.JobDone || len(a.Stages) != 2 {
		t.Fatalf("job %s with %d stages: %s", a.State, len(a.Stages), a.Reason)
	}
	skip := skipTrained
	skipTrained = func(ctx context.Context, src data.Source, n int64, size int) error {
		time.Sleep(3 * time.Second)
		return skip(ctx, src, n, size)
	}
	t.Cleanup(func() { skipTrained = skip })
	b := cl.waitJob(cl.submit(onFile(fmt.Sprintf("dir = %q\nevery = 5\nrestore = %q\n", rootB, ckpt.StepDir(rootA, 10)))), final)
	if b.State != api.JobDone || b.Step != 20 || b.RestoredFrom == nil || b.RestoredFrom.Step != 10 {
		t.Fatalf("restored pipeline %s at step %d (%s), restored from %+v", b.State, b.Step, b.Reason, b.RestoredFrom)
	}
}

// TestRestoreRefusesAFinishedOrMissingCheckpoint: submitting a job whose
// checkpoint.restore names nothing usable, or a checkpoint with no steps
// left, is refused with the job file's line.
func TestRestoreRefusesAFinishedOrMissingCheckpoint(t *testing.T) {
	root := t.TempDir()
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)
	if s := cl.waitJob(cl.submit(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 20\n", root))), final); s.State != api.JobDone {
		t.Fatalf("job %s: %s", s.State, s.Reason)
	}
	for _, tc := range []struct{ restore, want string }{
		{root, "nothing left to train"},
		{filepath.Join(root, "nowhere"), "no such file"},
		{t.TempDir(), "no complete checkpoint"},
	} {
		body, err := os.ReadFile(dpJob(t, fmt.Sprintf("[checkpoint]\nrestore = %q\n", tc.restore)))
		if err != nil {
			t.Fatal(err)
		}
		status, text := cl.post("/v1/jobs", api.ContentTypeTOML, body)
		if status != 400 || !strings.Contains(text, "checkpoint.restore") || !strings.Contains(text, tc.want) {
			t.Errorf("restore %s: %d %s, want 400 naming checkpoint.restore and %q", tc.restore, status, text, tc.want)
		}
	}
}

// sameTensors checks two PS checkpoint files hold the same tensors, bit
// for bit. A table's rows are in the order they were created, which
// concurrent replicas make racy, so table tensors are compared by id.
func sameTensors(t *testing.T, pathA, pathB string) {
	t.Helper()
	sameTensorMaps(t, pathA, readTensors(t, pathA), pathB, readTensors(t, pathB))
}

// sameTensorMaps compares what readTensors returned for two checkpoints.
func sameTensorMaps(t *testing.T, pathA string, a map[string][]uint32, pathB string, b map[string][]uint32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s has %d tensors, %s %d", pathA, len(a), pathB, len(b))
	}
	for name, va := range a {
		vb, ok := b[name]
		if !ok {
			t.Fatalf("%s lacks tensor %s", pathB, name)
		}
		if len(va) != len(vb) {
			t.Errorf("tensor %s: %d values in %s, %d in %s", name, len(va), pathA, len(vb), pathB)
			continue
		}
		for k, x := range va {
			if x != vb[k] {
				t.Errorf("tensor %s differs between %s and %s", name, pathA, pathB)
				break
			}
		}
	}
}

// readTensors reads a PS checkpoint file's float32 tensors as bits, table
// tensors keyed "<name>/<id>" row by row and blocks keyed by name.
func readTensors(t *testing.T, path string) map[string][]uint32 {
	t.Helper()
	f, err := ckpt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids := map[string][]int64{}
	for _, ti := range f.Tensors() {
		if table, ok := strings.CutSuffix(ti.Name, ".ids"); ok {
			if ids[table], err = f.Int64(ti.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := map[string][]uint32{}
	for _, ti := range f.Tensors() {
		if strings.HasSuffix(ti.Name, ".ids") {
			continue
		}
		v, err := f.Float32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		bits := make([]uint32, len(v))
		for i, x := range v {
			bits[i] = math.Float32bits(x)
		}
		table, _, _ := strings.Cut(ti.Name, ".opt")
		rows, isTable := ids[table]
		if !isTable || len(rows) == 0 {
			out[ti.Name] = bits
			continue
		}
		dim := len(bits) / len(rows)
		for r, id := range rows {
			out[fmt.Sprintf("%s/%d", ti.Name, id)] = bits[r*dim : (r+1)*dim]
		}
	}
	return out
}

// threeCPUNodes starts a cluster of the data-parallel catalog with CPU
// nodes a, b and c, and returns the functions that stop each.
func threeCPUNodes(t *testing.T) (*cluster, map[string]func()) {
	t.Helper()
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	stops := map[string]func(){}
	for _, name := range []string{"a", "b", "c"} {
		stops[name] = cl.startNode(name, "cpu")
	}
	cl.waitNodes(3)
	return cl, stops
}

// TestKilledNodeRestartsJobFromCheckpoint: a job with checkpoint.restarts
// whose PS and stage node dies after its first checkpoint becomes restarting, then
// failed naming its restart; the restart, a new job restored from the
// latest checkpoint, runs on the nodes left and trains to the last step.
func TestKilledNodeRestartsJobFromCheckpoint(t *testing.T) {
	root := t.TempDir()
	cl, stops := threeCPUNodes(t)
	src, err := os.ReadFile(dpJob(t, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 20\nrestarts = 1\n", root)))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "job.toml")
	job := strings.Replace(strings.Replace(string(src), "steps = 20", "steps = 400", 1), "ps_ratio = 1.0\n", "", 1)
	if err := os.WriteFile(path, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	id := cl.submit(path)
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Checkpoint != nil || s.State.Final() })
	if s.State != api.JobRunning || len(s.Stages) != 1 || len(s.Stages[0].Nodes) != 2 {
		t.Fatalf("before the kill: job %s (%s), stages %+v", s.State, s.Reason, s.Stages)
	}
	victim := s.PS[0] // a stage node too: without its PS shard the job cannot shrink
	stops[victim]()

	s = cl.waitJob(id, final)
	if s.State != api.JobFailed || s.RestartedAs == "" || !strings.Contains(s.Reason, "node "+victim) ||
		!strings.Contains(s.Reason, "restarted from step") {
		t.Fatalf("after the kill: job %s (%q), restarted as %q", s.State, s.Reason, s.RestartedAs)
	}
	r := cl.waitJob(s.RestartedAs, final)
	if r.State != api.JobDone || r.Step != 400 || r.RestartOf != id || r.Restarts != 1 {
		t.Fatalf("restart %s: %s (%s) at step %d, restart of %q (#%d)", r.ID, r.State, r.Reason, r.Step, r.RestartOf, r.Restarts)
	}
	if r.RestoredFrom == nil || r.RestoredFrom.Step < 20 || r.RestoredFrom.Step%20 != 0 {
		t.Fatalf("restart restored from %+v, want a checkpoint of j1", r.RestoredFrom)
	}
	for _, n := range r.Stages[0].Nodes {
		if n == victim {
			t.Fatalf("the restart runs on the dead node %s", victim)
		}
	}
}

// TestAnASPJobRestartsFromItsCheckpointWhenAReplicaDies: the parameter
// servers of an ASP job write its checkpoints (each once every replica has
// pushed through its step), and when the node of a replica dies the job
// restarts from the newest of them on the nodes left and trains to its
// last step.
func TestAnASPJobRestartsFromItsCheckpointWhenAReplicaDies(t *testing.T) {
	root := t.TempDir()
	cl, stops := threeCPUNodes(t)
	src := strings.Replace(dpJobSource(t, 400), "\nmode = \"bsp\"\n", "\nmode = \"asp\"\n", 1)
	id := cl.submit(writeJobFile(t, src+fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 20\nrestarts = 1\n", root)))
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Checkpoint != nil || s.State.Final() })
	if s.State != api.JobRunning || len(s.Stages[0].Nodes) != 2 || len(s.PS) != 1 {
		t.Fatalf("before the kill: %s (%s), stages %+v, ps %v", s.State, s.Reason, s.Stages, s.PS)
	}
	if m, err := ckpt.ReadManifest(s.Checkpoint.Dir); err != nil || m.Step != s.Checkpoint.Step || m.Step%20 != 0 {
		t.Fatalf("the ASP job's checkpoint %+v: manifest %+v, %v", s.Checkpoint, m, err)
	}
	victim := s.Stages[0].Nodes[0]
	if victim == s.PS[0] {
		victim = s.Stages[0].Nodes[1]
	}
	stops[victim]()

	s = cl.waitJob(id, final)
	if s.State != api.JobFailed || s.RestartedAs == "" {
		t.Fatalf("after the kill: job %s (%q), restarted as %q; want failed and restarted", s.State, s.Reason, s.RestartedAs)
	}
	r := cl.waitJob(s.RestartedAs, final)
	if r.State != api.JobDone || r.Step != 400 || r.RestoredFrom == nil || r.RestoredFrom.Step%20 != 0 || r.RestoredFrom.Step == 0 {
		t.Fatalf("restart %s: %s (%s) at step %d, restored from %+v", r.ID, r.State, r.Reason, r.Step, r.RestoredFrom)
	}
}

// TestNodeStopsWhilePeerReplicaIsGone: of a data-parallel job's two
// replicas, node b's stops mid-job, so node a's replica waits on a BSP
// step that never completes (its batch read ahead waits for rows of a
// step b never pushes). Stopping node a still returns within 10 s, well
// under the step timeout, and leaves no goroutine (startCluster checks).
func TestNodeStopsWhilePeerReplicaIsGone(t *testing.T) {
	cl := startClusterOn(t, "testdata/dp-catalog.toml", "")
	stopA := cl.startNode("a", "cpu")
	stopB := cl.startNode("b", "cpu")
	cl.waitNodes(2)
	src, err := os.ReadFile("testdata/dp-job.toml")
	if err != nil {
		t.Fatal(err)
	}
	job := strings.Replace(string(src), "steps = 20", "steps = 100000", 1)
	job = strings.Replace(job, `"testdata/tiny.toml"`, fmt.Sprintf("%q", mustAbs(t, "testdata/tiny.toml")), 1)
	path := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(path, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	id := cl.submit(path)
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 3 || s.State.Final() })
	if s.State != api.JobRunning {
		t.Fatalf("before the kill: job %s (%s), step %d", s.State, s.Reason, s.Step)
	}
	stopB()
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		stopA()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Logf("node a stopped in %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("node a still runs 10 s after it was told to stop")
	}
}

// TestRegisterTimeoutEndsRun: a node whose coordinator never answers says
// it is waiting for it, then gives up after register_timeout.
func TestRegisterTimeoutEndsRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs syncbuf.Buffer
	a, err := New(Config{Name: "x", Coordinator: dead, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: "cpu", Units: 1, Plain: true, RegisterTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("a coordinator given as host:port: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, errRegisterTimeout) || !strings.Contains(err.Error(), dead) {
		t.Fatalf("Run: %v, want the register timeout naming %s", err, dead)
	}
	if !strings.Contains(logs.String(), "waiting for coordinator") || !strings.Contains(logs.String(), "register_timeout=300ms") {
		t.Errorf("logs lack the wait: %s", logs.String())
	}
}

// TestSecondNodeOfOneNameEndsRun: a daemon under the name of a live node
// at another address is refused, and Run says which node has the name.
func TestSecondNodeOfOneNameEndsRun(t *testing.T) {
	cl := startCluster(t)
	cl.startNode("twin", "cpu")
	cl.waitNodes(1)
	a, err := New(Config{Name: "twin", Coordinator: cl.base, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: "cpu", Units: 1, Plain: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(cl.ctx, 20*time.Second) // without the refusal, Run would go on
	defer cancel()
	if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), "is taken by the live node twin~") {
		t.Errorf("Run: %v, want the coordinator's 409", err)
	}
}
