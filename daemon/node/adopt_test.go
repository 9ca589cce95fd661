package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/internal/syncbuf"
)

// restartableCoordinator serves a coordinator with a state directory on a
// fixed loopback address, and can stop it and start a new one there.
type restartableCoordinator struct {
	t        *testing.T
	cat      *config.Catalog
	addr     string
	stateDir string
	stop     func()
	// mutate, if set, changes the coordinator's configuration.
	mutate func(*coord.Config)
}

// startRestartableCoordinator serves a coordinator for the data-parallel
// catalog on a free loopback port with a fresh state directory.
func startRestartableCoordinator(t *testing.T) *restartableCoordinator {
	t.Helper()
	return startRestartableCoordinatorWith(t, nil)
}

// startRestartableCoordinatorWith is startRestartableCoordinator with its
// configuration changed by mutate.
func startRestartableCoordinatorWith(t *testing.T, mutate func(*coord.Config)) *restartableCoordinator {
	t.Helper()
	cat, err := config.LoadCatalog("testdata/dp-catalog.toml")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &restartableCoordinator{t: t, cat: cat, addr: ln.Addr().String(), stateDir: t.TempDir(), mutate: mutate}
	ln.Close()
	rc.start()
	return rc
}

func (rc *restartableCoordinator) start() {
	rc.t.Helper()
	cfg := coord.Config{Catalog: rc.cat, StateDir: rc.stateDir, HeartbeatInterval: interval, HeartbeatTimeout: hbTimeout, Logger: quiet}
	if rc.mutate != nil {
		rc.mutate(&cfg)
	}
	c, err := coord.New(cfg)
	if err != nil {
		rc.t.Fatal(err)
	}
	var ln net.Listener
	deadline := time.Now().Add(patience)
	for ln == nil {
		if ln, err = net.Listen("tcp", rc.addr); err != nil && time.Now().After(deadline) {
			rc.t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Serve(ctx, ln) }()
	rc.stop = func() { cancel(); <-done }
}

// cluster is a client of rc's address for starting nodes and jobs; the
// nodes stop, and its connections close, at the test's cleanup.
func (rc *restartableCoordinator) cluster() *cluster {
	t := rc.t
	ctx, cancel := context.WithCancel(context.Background())
	cl := &cluster{t: t, base: "http://" + rc.addr, ctx: ctx, client: &http.Client{Transport: &http.Transport{}, Timeout: patience}}
	t.Cleanup(func() { cancel(); cl.wg.Wait(); cl.client.CloseIdleConnections() })
	return cl
}

// TestCoordinatorRestartAdoptsRunningJob stops the coordinator in the
// middle of a data-parallel job and starts a new one on the same state
// directory: the nodes register again reporting their tasks, the job
// goes on under its id without a restart, new ids do not collide with old
// ones, and the end state is bit-identical to an uninterrupted run's.
func TestCoordinatorRestartAdoptsRunningJob(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the coordinator's and the nodes' cleanups
	rc := startRestartableCoordinator(t)
	t.Cleanup(func() { rc.stop() })
	cl := rc.cluster()
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)

	steps := 150
	job := func(root string) string {
		return dpJobOf(t, steps, fmt.Sprintf("[checkpoint]\ndir = %q\nevery = %d\n", root, steps))
	}
	ref := t.TempDir()
	if s := cl.waitJob(cl.submit(job(ref)), final); s.State != api.JobDone {
		t.Fatalf("reference job %s: %s", s.State, s.Reason)
	}

	root := t.TempDir()
	id := cl.submit(job(root))
	cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 10 || s.State.Final() })
	rc.stop()
	time.Sleep(5 * interval) // the nodes notice and keep training
	rc.start()

	s := cl.waitJob(id, final)
	if s.State != api.JobDone || s.Restarts != 0 || s.RestartedAs != "" || s.Step != int64(steps) {
		t.Fatalf("after the coordinator's restart: %s (%q), step %d, restarted as %q", s.State, s.Reason, s.Step, s.RestartedAs)
	}
	m, err := ckpt.VerifyDir(ckpt.StepDir(root, int64(steps)))
	if err != nil || m.JobID != id {
		t.Fatalf("final checkpoint: %+v, %v", m, err)
	}
	for shard := range m.Shards {
		name := ps.FileName(shard, m.Shards)
		sameTensors(t, filepath.Join(ckpt.StepDir(ref, int64(steps)), name), filepath.Join(ckpt.StepDir(root, int64(steps)), name))
	}
	next := cl.submit(job(t.TempDir()))
	if next == id || next == "j1" || next == "j2" {
		t.Errorf("a job submitted after the restart got id %s, already used", next)
	}
	cl.waitJob(next, final)
}

// TestATaskPlacedJustBeforeACoordinatorRestartIsHandedOver: the
// coordinator places a job and is stopped before the nodes' next
// heartbeat (2 s apart here) fetches their tasks. A new coordinator on the
// same state hands them over when the nodes register again, naming the
// ids they held, and the job runs to the end with no restart.
func TestATaskPlacedJustBeforeACoordinatorRestartIsHandedOver(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the coordinator's and the nodes' cleanups
	var logs syncbuf.Buffer
	rc := startRestartableCoordinatorWith(t, func(c *coord.Config) {
		c.HeartbeatInterval, c.HeartbeatTimeout, c.Logger = 2*time.Second, 20*time.Second, slog.New(slog.NewTextHandler(&logs, nil))
	})
	t.Cleanup(func() { rc.stop() })
	cl := rc.cluster()
	cl.startNode("a", "cpu")
	cl.startNode("b", "cpu")
	cl.waitNodes(2)

	id := cl.submit(dpJob(t, ""))
	cl.waitJob(id, func(s api.JobStatus) bool { return s.State != api.JobPending && s.State != api.JobQueued })
	rc.stop()
	rc.start()

	s := cl.waitJob(id, final)
	if s.State != api.JobDone || s.Restarts != 0 || s.RestartedAs != "" {
		t.Fatalf("after the coordinator's restart: %s (%q), restarted as %q", s.State, s.Reason, s.RestartedAs)
	}
	if !strings.Contains(logs.String(), "handing over tasks the node never got") {
		t.Errorf("no task was handed over (did a heartbeat fetch them before the stop?):\n%s", logs.String())
	}
}

// TestLeaseStopsTasksWithoutTheCoordinator: a node that cannot reach the
// coordinator keeps training until its lease runs out, then stops its
// tasks (fencing: the coordinator may have given their work away).
func TestLeaseStopsTasksWithoutTheCoordinator(t *testing.T) {
	for _, hang := range []bool{false, true} {
		name := map[bool]string{false: "refused", true: "hung"}[hang]
		t.Run(name, func(t *testing.T) { leaseStopsTasks(t, hang) })
	}
}

// leaseStopsTasks: the coordinator goes away for good, refusing
// connections or (hang) taking them and never answering, as a stopped
// process or a network that drops packets does; the nodes stop their
// tasks once their lease has run out.
func leaseStopsTasks(t *testing.T, hang bool) {
	defer goleak.VerifyNone(t)
	rc := startRestartableCoordinator(t)
	addr := rc.addr
	cl := &cluster{t: t, base: "http://" + addr, client: &http.Client{Transport: &http.Transport{}, Timeout: patience}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait(); cl.client.CloseIdleConnections() }()

	const lease = time.Second
	agents := map[string]*Agent{}
	for _, name := range []string{"a", "b"} {
		a, err := New(Config{Name: name, Coordinator: cl.base, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0", Type: "cpu",
			Units: 1, Plain: true, Lease: lease, ReadyTimeout: 30 * time.Second, StepTimeout: 30 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		agents[name] = a
		wg.Go(func() { a.Run(ctx) })
	}
	cl.waitNodes(2)
	id := cl.submit(longDPJob(t, 100000))
	cl.waitJob(id, func(s api.JobStatus) bool { return s.Step >= 2 || s.State.Final() })
	for name, a := range agents {
		if r, _ := a.registration(api.RegisterRequest{Name: name}, name+"~1"); r.Previous != name+"~1" {
			t.Errorf("node %s, holding its tasks, would register again naming previous id %q, want %s~1", name, r.Previous, name)
		}
	}
	rc.stop() // and never back
	gone := time.Now()
	if hang {
		defer holdConnections(t, rc.addr)()
	}
	time.Sleep(lease / 2)
	for name, a := range agents {
		if len(a.reports()) == 0 {
			t.Errorf("node %s stopped its tasks %s after losing the coordinator, within its %s lease", name, time.Since(gone), lease)
		}
	}
	deadline := gone.Add(lease + 5*time.Second)
	for name, a := range agents {
		for len(a.reports()) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("node %s still runs %d task(s) %s after losing the coordinator (lease %s)", name, len(a.reports()), time.Since(gone), lease)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// It cannot vouch that a task it does not report never reached it.
		if r, _ := a.registration(api.RegisterRequest{Name: name}, name+"~1"); r.Previous != "" {
			t.Errorf("node %s stopped its tasks on its own, yet would register again naming previous id %q", name, r.Previous)
		}
	}
}

// holdConnections listens on addr, takes every connection and answers
// none, until the returned function closes them all.
func holdConnections(t *testing.T, addr string) (release func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
}

// TestAnAdoptedDynamicJobIsStillBalanced: a coordinator restarted in the
// middle of a dynamic-batching job (one of its two nodes throttled to a
// quarter just before, the throttle not yet handed on) gives the job its
// batching back once the nodes have registered again: the throttle
// reaches the node, and the controller goes on moving batch to the fast
// replica, its adjustments counted on from the record.
func TestAnAdoptedDynamicJobIsStillBalanced(t *testing.T) {
	rc := startRestartableCoordinator(t)
	t.Cleanup(func() { rc.stop() })
	cl := rc.cluster()
	cl.startNodeAt("fast", "cpu", 1)
	cl.startNodeAt("slow", "cpu", 1)
	cl.waitNodes(2)
	id := cl.submit(writeJob(t, 1_000_000, 1024, nil, "[batching]\nmode = \"dynamic\"\ninterval = 2\n"))
	s := cl.waitJob(id, func(s api.JobStatus) bool { return s.State.Final() || s.Step >= 5 })
	if s.State != api.JobRunning || s.Batching == nil {
		t.Fatalf("job %s (%q), batching %+v", s.State, s.Reason, s.Batching)
	}
	cl.do("POST", "/v1/nodes/slow/throttle", api.ContentTypeJSON, []byte(`{"cpu_share": 0.25}`), &api.NodeStatus{})
	rc.stop() // before the node's next heartbeat fetches the share, most likely
	before := s.Batching.Adjustments
	rc.start()

	s = cl.waitJob(id, func(s api.JobStatus) bool {
		if s.State.Final() || s.Batching == nil || len(s.Stages) != 1 || len(s.Stages[0].Batches) != 2 {
			return s.State.Final()
		}
		split := splitOf(t, s.Stages[0], "fast", "slow")
		return s.Batching.Adjustments > before && split[0] > split[1]
	})
	if s.State != api.JobRunning || s.Batching == nil || s.Batching.Mode != "dynamic" {
		t.Fatalf("after the restart: job %s (%q), batching %+v", s.State, s.Reason, s.Batching)
	}
	var nodes []api.NodeStatus
	cl.do("GET", "/v1/nodes", "", nil, &nodes)
	for _, n := range nodes {
		if n.Name == "slow" && n.State == api.NodeAlive && n.CPUShareRequested != 0.25 {
			t.Errorf("node slow after the restart: share asked %g, want 0.25", n.CPUShareRequested)
		}
	}
	cl.send("DELETE", "/v1/jobs/"+id, "", nil)
}
