package node

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/internal/threadtest"
)

// threadNices returns the nice value of every thread of this process.
func threadNices(t *testing.T) map[int]int {
	t.Helper()
	paths, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil || len(paths) == 0 {
		t.Skipf("no /proc/self/task: %v", err)
	}
	out := map[int]int{}
	for _, p := range paths {
		tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		nice, err := cpuset.ThreadNice(tid)
		if err != nil {
			continue // the thread exited meanwhile
		}
		out[tid] = nice
	}
	return out
}

func countNice(nices map[int]int, nice int) int {
	n := 0
	for _, v := range nices {
		if v == nice {
			n++
		}
	}
	return n
}

// TestStageRunsOnALowerPriorityThread runs a job on a node with
// ComputeNice: while it trains, one of the process's threads runs at that
// many nice levels below the rest, and once the job is cancelled and its
// tasks have ended, none does.
func TestStageRunsOnALowerPriorityThread(t *testing.T) {
	base, err := cpuset.ThreadNice(0)
	if err != nil || base+7 > 19 {
		t.Skipf("nice %d already near the bottom, or unknown: %v", base, err)
	}
	want := base + 7
	// A goroutine that ends locked to the main thread leaves it parked for
	// good (the process would end with it): it runs nothing again, and the
	// count leaves it out.
	others := func() int {
		n := threadNices(t)
		delete(n, os.Getpid())
		return countNice(n, want)
	}
	before, beforeAll := others(), countNice(threadNices(t), want)
	cl := startCluster(t)
	stop := cl.startNodeAdjusted("a", "cpu", cl.base, func(c *Config) { c.ComputeNice = 7 })
	cl.startNode("b", "gpu")
	cl.waitNodes(2)
	id := cl.submit(longJob(t))
	cl.waitJob(id, func(s api.JobStatus) bool { return s.Step > 2 || s.State.Final() })
	if got := countNice(threadNices(t), want); got != beforeAll+1 {
		t.Errorf("%d threads at nice %d while the job trains, want %d (the stage's)", got, want, beforeAll+1)
	}
	if status, body := cl.send(http.MethodDelete, "/v1/jobs/"+id, "", nil); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, body)
	}
	cl.waitJob(id, final)
	stop() // waits for the node's task goroutines; their threads exit just after
	deadline := time.Now().Add(10 * time.Second)
	for others() != before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := others(); got != before {
		t.Errorf("%d threads at nice %d after the node stopped, want %d: the stage's thread outlived its task", got, want, before)
	}
}

// TestEveryStageTaskStaysOnItsThread: a task that waits on no other
// process keeps the daemon's priority but, like the others, runs on one
// thread through its waits.
func TestEveryStageTaskStaysOnItsThread(t *testing.T) {
	a := &Agent{psAddr: "127.0.0.1:7171", cfg: Config{ComputeNice: 7}}
	base, err := cpuset.ThreadNice(0)
	if err != nil {
		t.Skipf("no thread priorities here: %v", err)
	}
	var threads, nice int
	done := make(chan struct{})
	go func() { // ends locked to its thread, which then exits
		defer close(done)
		a.onComputeThread(&task{spec: api.Task{Replicas: 1, Layout: []api.StageLayout{{}}, PS: []string{a.psAddr}}})
		nice, _ = cpuset.ThreadNice(0)
		threads = threadtest.Visited(20)
	}()
	<-done
	if threads != 1 {
		t.Errorf("a one-replica stage's goroutine ran on %d threads through 20 blocking calls, want 1", threads)
	}
	if nice != base {
		t.Errorf("its thread runs at nice %d, want the daemon's %d (it waits on no other process)", nice, base)
	}
}

func TestOnlyTasksThatWaitOnOthersLowerTheirPriority(t *testing.T) {
	a := &Agent{psAddr: "127.0.0.1:7171"}
	one := []api.StageLayout{{}}
	for _, c := range []struct {
		task api.Task
		want bool
	}{
		{api.Task{Replicas: 1, Layout: one, PS: []string{"127.0.0.1:7171"}}, false},
		{api.Task{Replicas: 1, Layout: one}, false},
		{api.Task{Replicas: 2, Layout: one, PS: []string{"127.0.0.1:7171"}}, true},
		{api.Task{Replicas: 1, Layout: []api.StageLayout{{}, {}}, PS: []string{"127.0.0.1:7171"}}, true},
		{api.Task{Replicas: 1, Layout: one, PS: []string{"127.0.0.1:7171", "10.0.0.2:7171"}}, true},
	} {
		if got := a.waitsOnOthers(c.task); got != c.want {
			t.Errorf("%d replicas, %d stages, PS %v: waits on others %v, want %v",
				c.task.Replicas, len(c.task.Layout), c.task.PS, got, c.want)
		}
	}
}

func TestNewRefusesAComputeNiceOutOfRange(t *testing.T) {
	for _, nice := range []int{-1, 20} {
		_, err := New(Config{Name: "n", Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0", Type: "cpu", Units: 1, Plain: true,
			ComputeNice: nice, Logger: quiet}) // refused before any listener opens
		if err == nil || !strings.Contains(err.Error(), "compute nice") {
			t.Fatalf("compute nice %d: %v, want an error naming it", nice, err)
		}
	}
}

// A CPU node whose units and threads would give a stage more kernel threads
// than a backend splits across is refused when the daemon starts, not when
// its first task does; a GPU node's units are devices and are not counted.
func TestNewRefusesMoreThreadsThanAStageCanUse(t *testing.T) {
	_, err := New(Config{Name: "big", Coordinator: "127.0.0.1:1", Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: "cpu", Units: 8, Threads: 128, Plain: true})
	if err == nil || !strings.Contains(err.Error(), "node big: 8 units of 128 threads: a stage's kernels split across at most 512 threads") {
		t.Fatalf("8 units of 128 threads: %v", err)
	}
	a, err := New(Config{Name: "fits", Coordinator: "127.0.0.1:1", Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: "cpu", Units: 4, Threads: 128, Plain: true, Logger: quiet})
	if err != nil {
		t.Fatalf("4 units of 128 threads: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = a.Run(ctx) // closes its listeners
}
