package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/ps"
)

func TestUnitsOnlyUpdates(t *testing.T) {
	cur := api.Task{TaskID: "j1.s0.r0", JobID: "j1", Role: api.RoleStage, Units: 1, Batch: 64, Generation: 1}
	spec := cur
	spec.Units, spec.TaskCPUShare, spec.Generation = 3, 0.75, 2
	if !unitsOnly(cur, spec) {
		t.Error("a change of units and share is not units-only")
	}
	resized := spec
	resized.Members, resized.Batches, resized.FromStep = []int{0}, []int{64}, 5
	ps := spec
	ps.Role = api.RolePS
	for name, s := range map[string]api.Task{"resize": resized, "ps": ps} {
		if unitsOnly(cur, s) {
			t.Errorf("%s counts as units-only", name)
		}
	}

	a := &Agent{log: quiet, throttle: newCPUThrottle(nil)}
	f := &fakeSleeper{}
	a.throttle.sleep = f.sleep
	tk := &task{spec: cur}
	if a.updateUnits(tk, cur) {
		t.Error("an equal generation was applied")
	}
	if d, _ := a.afterTaskCompute(context.Background(), tk, 10*time.Millisecond); d != 0 {
		t.Errorf("no task share: slept %v", d)
	}
	if !a.updateUnits(tk, spec) || tk.current().Units != 3 {
		t.Fatalf("units update not applied: %+v", tk.current())
	}
	spec.TaskCPUShare = 0.25
	spec.Generation = 3
	a.updateUnits(tk, spec)
	if d, ok := a.afterTaskCompute(context.Background(), tk, 10*time.Millisecond); d != 30*time.Millisecond || !ok {
		t.Errorf("share 0.25 after 10ms of compute: slept %v, want 30ms", d)
	}
}

func TestAWorkerBuiltAfterAUnitsUpdateIsNotResized(t *testing.T) {
	spec := api.Task{TaskID: "j1.s0.r0", JobID: "j1", Role: api.RoleStage, Units: 1, Batch: 64, Generation: 1}
	units := spec
	units.Units, units.TaskCPUShare, units.Generation = 2, 0.5, 2
	tk := &task{spec: spec, latest: &units}
	if u := pendingResize(tk); u != nil {
		t.Errorf("a units-only update resizes the worker: %+v", u)
	}
	resized := units
	resized.Members, resized.Batches, resized.FromStep, resized.Generation = []int{0}, []int{64}, 3, 3
	tk.latest = &resized
	if u := pendingResize(tk); u == nil || u.Generation != 3 {
		t.Errorf("an elastic update is not applied: %+v", u)
	}
}

// allocCluster is a coordinator with the allocator under policy and node
// daemons of units units each, on loopback in this process.
func startAllocCluster(t *testing.T, policy string) *cluster {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
	catPath := filepath.Join(t.TempDir(), "catalog.toml")
	cat := "version = 1\nname = \"alloc\"\n[[type]]\nname = \"cpu\"\nkind = \"cpu\"\nprice = 0.04\nmax_units = 8\n" +
		"peak_flops = 1.344e11\nmem_bandwidth = 8.0e9\nlink_bandwidth = 3.9e8\n"
	if err := os.WriteFile(catPath, []byte(cat), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.LoadCatalog(catPath)
	if err != nil {
		t.Fatal(err)
	}
	co, err := coord.New(coord.Config{Catalog: c, HeartbeatInterval: interval, HeartbeatTimeout: hbTimeout, Logger: quiet,
		AllocPolicy: policy, AllocEpoch: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := &cluster{t: t, base: "http://" + ln.Addr().String(), ctx: ctx,
		client: &http.Client{Transport: &http.Transport{}, Timeout: patience}}
	cl.wg.Go(func() { co.Serve(ctx, ln) })
	t.Cleanup(func() {
		cancel()
		cl.wg.Wait()
		cl.client.CloseIdleConnections()
	})
	return cl
}

// startUnitsNode runs a plain node daemon offering units units of cpu.
func (cl *cluster) startUnitsNode(name string, units int) {
	cl.t.Helper()
	a, err := New(Config{Name: name, Coordinator: cl.base, Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: "cpu", Units: units, Plain: true, ReadyTimeout: 30 * time.Second, StepTimeout: 30 * time.Second, Logger: quiet})
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.wg.Go(func() {
		if err := a.Run(cl.ctx); err != nil {
			cl.t.Errorf("node %s: %v", name, err)
		}
	})
}

// checkpointedJob is the data-parallel test job with steps steps, seed
// seed and a checkpoint of its last step under root.
func checkpointedJob(t *testing.T, steps int, seed int, root string) string {
	t.Helper()
	src, err := os.ReadFile(longDPJob(t, steps))
	if err != nil {
		t.Fatal(err)
	}
	job := string(src) + fmt.Sprintf("[checkpoint]\ndir = %q\nevery = %d\n", root, steps)
	job = replaceLine(t, job, "seed = 3", fmt.Sprintf("seed = %d", seed))
	path := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(path, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func replaceLine(t *testing.T, s, old, new string) string {
	t.Helper()
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	t.Fatalf("%q not in the job", old)
	return s
}

// TestAllocatorMovesUnitsWithoutChangingTheMath: two live jobs share a
// node of 4 units under the quality policy. The first, alone, gets the
// node; once the second arrives the allocator gives the young job most of
// the units at the next epochs; both finish, and the first ends with the
// same loss and parameters, bit for bit, as the same job run alone with
// the allocator off (units change its CPU share only).
func TestAllocatorMovesUnitsWithoutChangingTheMath(t *testing.T) {
	const steps = 1500
	alone := t.TempDir()
	var want api.JobStatus
	t.Run("reference", func(t *testing.T) {
		cl := startAllocCluster(t, coord.AllocOff)
		cl.startUnitsNode("a", 4)
		cl.waitNodes(1)
		want = cl.waitJob(cl.submit(checkpointedJob(t, steps, 3, alone)), final)
		if want.State != api.JobDone {
			t.Fatalf("reference job: %s (%s)", want.State, want.Reason)
		}
	})
	shared := t.TempDir()
	cl := startAllocCluster(t, "quality")
	cl.startUnitsNode("a", 4)
	cl.waitNodes(1)
	first := cl.submit(checkpointedJob(t, steps, 3, shared))
	s := cl.waitJob(first, func(s api.JobStatus) bool {
		return s.State.Final() || s.Alloc != nil && s.Alloc.Units == 4 && s.Step > 300
	})
	if s.State != api.JobRunning || s.Alloc == nil || s.Alloc.Units != 4 {
		t.Fatalf("the first job alone: %s (%s) at step %d, alloc %+v", s.State, s.Reason, s.Step, s.Alloc)
	}
	second := cl.submit(checkpointedJob(t, 1000, 5, t.TempDir())) // long enough to still run when units move
	moved := cl.waitJob(second, func(s api.JobStatus) bool {
		return s.State.Final() || s.Alloc != nil && s.Alloc.Units > 1 && cl.job(first).Alloc.Units < 4
	})
	if moved.State != api.JobRunning || moved.Alloc == nil || moved.Alloc.Units <= 1 {
		t.Fatalf("the second job: %s (%s), alloc %+v; first %+v", moved.State, moved.Reason, moved.Alloc, cl.job(first).Alloc)
	}
	if b := cl.waitJob(second, final); b.State != api.JobDone {
		t.Fatalf("second job: %s (%s)", b.State, b.Reason)
	}
	got := cl.waitJob(first, final)
	if got.State != api.JobDone || got.Step != steps {
		t.Fatalf("first job: %s (%s) at step %d", got.State, got.Reason, got.Step)
	}
	if got.Loss != want.Loss {
		t.Errorf("final loss %v with the allocator, %v without", got.Loss, want.Loss)
	}
	name := ps.FileName(0, 1)
	for _, root := range []string{alone, shared} {
		waitManifest(t, root, steps)
	}
	sameTensors(t, filepath.Join(ckpt.StepDir(alone, steps), name), filepath.Join(ckpt.StepDir(shared, steps), name))
}

// waitManifest waits for the manifest of step under root (written as the
// job ends).
func waitManifest(t *testing.T, root string, step int64) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		if _, err := ckpt.ReadManifest(ckpt.StepDir(root, step)); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of step %d: %v", step, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
