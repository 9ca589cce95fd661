package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// Test timing: nodes heartbeat every interval and die after timeout; waits
// give up after patience (generous: the race detector on two shared cores).
const (
	interval = 20 * time.Millisecond
	timeout  = time.Second
	patience = 15 * time.Second
)

// testCluster is a coordinator serving on a loopback listener and a client
// for it.
type testCluster struct {
	t      *testing.T
	c      *Coordinator
	base   string
	client *http.Client
	cat    *config.Catalog
	ctx    context.Context // ends when the test ends
	nodes  sync.WaitGroup  // fake node goroutines
}

func loadTestCatalog(t testing.TB) *config.Catalog {
	t.Helper()
	cat, err := config.LoadCatalog("testdata/catalog.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// startCluster serves a coordinator until the test ends, then checks that
// every goroutine it and the fake nodes started has stopped.
func startCluster(t *testing.T, mutate func(*Config)) *testCluster {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
	cat := loadTestCatalog(t)
	cfg := Config{Catalog: cat, HeartbeatInterval: interval, HeartbeatTimeout: timeout,
		Logger: slog.New(slog.DiscardHandler)}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx, ln) }()
	tc := &testCluster{t: t, c: c, base: "http://" + ln.Addr().String(), cat: cat, ctx: ctx,
		client: &http.Client{Transport: &http.Transport{}, Timeout: patience}}
	t.Cleanup(func() {
		cancel()
		tc.nodes.Wait()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(patience):
			t.Error("Serve did not return after its context ended")
		}
		tc.client.CloseIdleConnections()
	})
	return tc
}

// do sends a request and returns the status and body.
func (tc *testCluster) do(method, path, contentType string, body []byte) (int, []byte) {
	tc.t.Helper()
	req, err := http.NewRequest(method, tc.base+path, bytes.NewReader(body))
	if err != nil {
		tc.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := tc.client.Do(req)
	if err != nil {
		tc.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tc.t.Fatalf("%s %s: reading the reply: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// call sends v as JSON and decodes the reply into out, failing the test
// unless the status is want.
func (tc *testCluster) call(method, path string, v any, want int, out any) {
	tc.t.Helper()
	var body []byte
	if v != nil {
		var err error
		if body, err = json.Marshal(v); err != nil {
			tc.t.Fatal(err)
		}
	}
	status, b := tc.do(method, path, api.ContentTypeJSON, body)
	if status != want {
		tc.t.Fatalf("%s %s: status %d (%s), want %d", method, path, status, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			tc.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

func (tc *testCluster) submit(jobTOML string) string {
	tc.t.Helper()
	status, b := tc.do("POST", "/v1/jobs", api.ContentTypeTOML, []byte(jobTOML))
	if status != http.StatusCreated {
		tc.t.Fatalf("submit: status %d: %s", status, b)
	}
	var r api.SubmitResponse
	if err := json.Unmarshal(b, &r); err != nil {
		tc.t.Fatal(err)
	}
	return r.JobID
}

func (tc *testCluster) job(id string) api.JobStatus {
	tc.t.Helper()
	var s api.JobStatus
	tc.call("GET", "/v1/jobs/"+id, nil, http.StatusOK, &s)
	return s
}

// waitJob polls a job until it reaches a final state.
func (tc *testCluster) waitJob(id string) api.JobStatus {
	tc.t.Helper()
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		if s := tc.job(id); s.State.Final() {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
	tc.t.Fatalf("job %s did not finish within %s: %+v", id, patience, tc.job(id))
	return api.JobStatus{}
}

// runCoordinator runs a coordinator of cfg without its HTTP listener (tests
// call its Handler); stop ends it and waits until Run has returned, the
// state database closed.
func runCoordinator(t testing.TB, cfg Config) (c *Coordinator, stop func()) {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	return c, func() { cancel(); <-done }
}

// jobAndModel parses a job file and loads its model.
func jobAndModel(t testing.TB, jobTOML string) (*config.Job, *config.Model) {
	t.Helper()
	jf, err := config.ParseJob("job.toml", []byte(jobTOML))
	if err != nil {
		t.Fatal(err)
	}
	m, err := config.LoadModel(jf.Model)
	if err != nil {
		t.Fatal(err)
	}
	return jf, m
}

// expectedPlan plans a job file the way the coordinator does, so that
// tests can provide the nodes its plan needs.
func (tc *testCluster) expectedPlan(jobTOML string) *sched.Plan {
	tc.t.Helper()
	jf, m := jobAndModel(tc.t, jobTOML)
	p, err := JobProblem(jf, m, tc.cat)
	if err != nil {
		tc.t.Fatal(err)
	}
	plan, err := sched.Run(context.Background(), jf.Method, p, sched.Options{Seed: jf.Seed})
	if err != nil || !plan.Feasible {
		tc.t.Fatalf("plan: %v %+v", err, plan)
	}
	return plan
}

// fakeNode is a node daemon stand-in: it registers, heartbeats, and makes
// up progress on the tasks it is given: each heartbeat advances a stage
// task by stride steps, with loss 1/(1+step) and Batch*10 samples/s.
type fakeNode struct {
	req api.RegisterRequest
	id  string
	// failAt, when > 0, makes stage tasks report failure at that step.
	failAt int64
	// stride is how many steps a heartbeat advances a task (default 1).
	stride int64
	// stall, when closed, stops the heartbeats (the node "dies").
	stall chan struct{}
	// report, when set, makes up each heartbeat's report on a task
	// instead of the default progress (called with mu held).
	report func(t api.Task, r *api.TaskReport)

	mu       sync.Mutex
	tasks    map[string]api.Task // as last assigned
	reports  map[string]api.TaskReport
	received map[string]api.Task // every task ever assigned
	stopped  map[string]bool     // tasks that disappeared from a reply
	lastBeat time.Time           // when the last heartbeat was sent
}

func newFakeNode(name, typ string, units, port int) *fakeNode {
	return &fakeNode{req: api.RegisterRequest{Name: name, DataAddr: fmt.Sprintf("127.0.0.1:%d", port), Type: typ,
		Units: units, Cores: 2, MemoryBytes: 1 << 30}, stall: make(chan struct{}),
		tasks: map[string]api.Task{}, reports: map[string]api.TaskReport{}, received: map[string]api.Task{}, stopped: map[string]bool{}}
}

// start registers the node and heartbeats until the test's context ends
// or the node stalls.
func (tc *testCluster) start(n *fakeNode) {
	tc.t.Helper()
	var r api.RegisterResponse
	tc.call("POST", "/v1/nodes/register", n.req, http.StatusOK, &r)
	n.id = r.NodeID
	if r.HeartbeatIntervalMS != interval.Milliseconds() {
		tc.t.Errorf("heartbeat interval %d ms, want %d", r.HeartbeatIntervalMS, interval.Milliseconds())
	}
	tc.nodes.Go(func() { tc.heartbeatLoop(n) })
}

func (tc *testCluster) heartbeatLoop(n *fakeNode) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tc.ctx.Done():
			return
		case <-n.stall:
			return
		case <-tick.C:
		}
		body, _ := json.Marshal(api.Heartbeat{Tasks: n.progress()})
		n.mu.Lock()
		n.lastBeat = time.Now()
		n.mu.Unlock()
		req, _ := http.NewRequestWithContext(tc.ctx, "POST", tc.base+"/v1/nodes/"+n.id+"/heartbeat", bytes.NewReader(body))
		req.Header.Set("Content-Type", api.ContentTypeJSON)
		resp, err := tc.client.Do(req)
		if err != nil {
			continue // shutting down
		}
		var hr api.HeartbeatResponse
		err = json.NewDecoder(resp.Body).Decode(&hr)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			continue
		}
		n.assign(hr.Tasks)
	}
}

// progress advances every task by a step and returns the reports.
func (n *fakeNode) progress() []api.TaskReport {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []api.TaskReport
	for id, t := range n.tasks {
		r := n.reports[id]
		r.TaskID = id
		if n.report != nil {
			n.report(t, &r)
		} else if t.Role == api.RoleStage && r.State != api.TaskDone {
			r.Step = min(t.Steps, r.Step+max(1, n.stride))
			r.Loss = 1 / (1 + float64(r.Step))
			r.SamplesPerS = float64(t.Batch) * 10
			r.State = api.TaskRunning
			if r.Step >= t.Steps {
				r.State = api.TaskDone
			}
			if n.failAt > 0 && r.Step >= n.failAt {
				r.State, r.Error = api.TaskFailed, "out of memory"
			}
		} else if t.Role == api.RolePS {
			r.State = api.TaskRunning
		}
		n.reports[id] = r
		out = append(out, r)
	}
	return out
}

func (n *fakeNode) assign(tasks []api.Task) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := map[string]api.Task{}
	for _, t := range tasks {
		now[t.TaskID] = t
		n.received[t.TaskID] = t
	}
	for id := range n.tasks {
		if _, ok := now[id]; !ok {
			n.stopped[id] = true
			delete(n.reports, id)
		}
	}
	n.tasks = now
}

// snapshot returns copies of what the node was given and what it stopped.
// receivedTasks is every task the nodes received, of the given role ("":
// any), node by node.
func receivedTasks(nodes []*fakeNode, role string) []api.Task {
	var out []api.Task
	for _, n := range nodes {
		received, _, _ := n.snapshot()
		for _, task := range received {
			if role == "" || task.Role == role {
				out = append(out, task)
			}
		}
	}
	return out
}

func (n *fakeNode) snapshot() (received map[string]api.Task, current map[string]api.Task, stopped map[string]bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	received, current, stopped = map[string]api.Task{}, map[string]api.Task{}, map[string]bool{}
	for k, v := range n.received {
		received[k] = v
	}
	for k, v := range n.tasks {
		current[k] = v
	}
	for k, v := range n.stopped {
		stopped[k] = v
	}
	return received, current, stopped
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, patience)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nodesFor registers fake nodes that can host plan: per stage, one node
// with all but one of its units and one with a single unit (so stages with
// several units get two replicas of different sizes), and one CPU node for
// the parameter servers.
func (tc *testCluster) nodesFor(plan *sched.Plan) []*fakeNode {
	tc.t.Helper()
	var nodes []*fakeNode
	port := 9000
	add := func(typ string, units int) {
		port++
		n := newFakeNode(fmt.Sprintf("%s-%d", typ, port), typ, units, port)
		tc.start(n)
		nodes = append(nodes, n)
	}
	for _, s := range plan.Stages {
		if s.Units > 1 {
			add(s.Type, s.Units-1)
		}
		add(s.Type, 1)
	}
	add(firstCPUType(tc.cat), 1)
	return nodes
}

// addLiveNode adds to c a live node of two cpu units, id id, named name,
// as if it had registered.
func addLiveNode(c *Coordinator, id, name string) *node {
	n := &node{id: id, req: api.RegisterRequest{Name: name, Type: "cpu", Units: 2}, state: api.NodeAlive}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = append(c.nodes, n)
	return n
}

// roundTrip is r as the state database gives it back: through its JSON.
func roundTrip(t *testing.T, r store.Job) store.Job {
	t.Helper()
	stored, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back store.Job
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	return back
}
