package node

import (
	"context"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

func TestDutyCycleSleep(t *testing.T) {
	for _, tc := range []struct {
		share   float64
		compute time.Duration
		want    time.Duration
	}{
		{0.25, 10 * time.Millisecond, 30 * time.Millisecond}, // compute + sleep = 4 x compute
		{0.5, 10 * time.Millisecond, 10 * time.Millisecond},
		{0.01, time.Millisecond, 99 * time.Millisecond},
		{1, 10 * time.Millisecond, 0},
		{0.25, 0, 0},
		{0.25, -time.Millisecond, 0},
		{0, 10 * time.Millisecond, 0}, // never reached: set refuses it
	} {
		if got := dutyCycleSleep(tc.share, tc.compute); got != tc.want {
			t.Errorf("share %g, compute %s: sleep %s, want %s", tc.share, tc.compute, got, tc.want)
		}
	}
}

// fakeSleeper records the sleeps asked for and returns at once (false
// when ctx has ended).
type fakeSleeper struct {
	mu    sync.Mutex
	slept []time.Duration
}

func (f *fakeSleeper) sleep(ctx context.Context, d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slept = append(f.slept, d)
	return ctx.Err() == nil
}

func (f *fakeSleeper) sleeps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.slept...)
}

func TestThrottleSleepsInTheDutyCycle(t *testing.T) {
	var f fakeSleeper
	th := newCPUThrottle(nil)
	th.sleep = f.sleep
	ctx := context.Background()
	if share, mode := th.state(); share != 1 || mode != api.CPUShareNone {
		t.Fatalf("new throttle: %g %s", share, mode)
	}
	if d, ok := th.afterCompute(ctx, 10*time.Millisecond); d != 0 || !ok || len(f.sleeps()) != 0 {
		t.Fatalf("share 1 slept %s (%v)", d, f.sleeps())
	}
	if err := th.set(0.25); err != nil {
		t.Fatal(err)
	}
	if share, mode := th.state(); share != 0.25 || mode != api.CPUShareDutyCycle {
		t.Fatalf("after set(0.25): %g %s", share, mode)
	}
	if d, ok := th.afterCompute(ctx, 10*time.Millisecond); d != 30*time.Millisecond || !ok {
		t.Fatalf("share 0.25 after 10ms of compute: slept %s, %v", d, ok)
	}
	if got := f.sleeps(); len(got) != 1 || got[0] != 30*time.Millisecond {
		t.Fatalf("sleeps %v, want [30ms]", got)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := th.afterCompute(cancelled, time.Millisecond); ok {
		t.Error("a sleep its context ended reports it slept")
	}
	for _, bad := range []float64{0, -1, 2, api.MinCPUShare / 2} {
		if err := th.set(bad); err == nil {
			t.Errorf("set(%g) accepted", bad)
		}
	}
	if share, _ := th.state(); share != 0.25 {
		t.Errorf("a refused share changed it to %g", share)
	}
}

// fakeCgroup lays out a cgroup v2 in which process pid is, and
// /proc/self/cgroup naming it; others lists other processes in it.
func fakeCgroup(t *testing.T, pid int, others ...string) (procCgroup, root, cpuMax string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "cgroup")
	cg := filepath.Join(root, "heterps.slice", "node.scope")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	procs := strings.Join(append([]string{strconv.Itoa(pid)}, others...), "\n") + "\n"
	procCgroup = filepath.Join(dir, "self-cgroup")
	cpuMax = filepath.Join(cg, "cpu.max")
	for path, content := range map[string]string{procCgroup: "0::/heterps.slice/node.scope\n",
		filepath.Join(cg, "cgroup.procs"): procs, cpuMax: "max 100000\n"} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return procCgroup, root, cpuMax
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestCgroupCapsTheDaemon: with a cgroup v2 of its own that it may write,
// the throttle writes cpu.max (share x cpus periods) and sleeps no more;
// share 1 and closing restore the original.
func TestCgroupCapsTheDaemon(t *testing.T) {
	procCgroup, root, cpuMax := fakeCgroup(t, 42)
	cg, err := findCgroupCPU(procCgroup, root, 42, 2)
	if err != nil {
		t.Fatal(err)
	}
	var f fakeSleeper
	th := newCPUThrottle(cg)
	th.sleep = f.sleep
	if err := th.set(0.25); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cpuMax); got != "50000 100000" {
		t.Errorf("cpu.max at share 0.25 of 2 cpus: %q, want \"50000 100000\"", got)
	}
	if share, mode := th.state(); share != 0.25 || mode != api.CPUShareCgroup {
		t.Errorf("state %g %s, want 0.25 cgroup", share, mode)
	}
	if d, _ := th.afterCompute(context.Background(), 10*time.Millisecond); d != 0 || len(f.sleeps()) != 0 {
		t.Errorf("the cgroup mode sleeps %s too", d)
	}
	if err := th.set(1); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cpuMax); got != "max 100000" {
		t.Errorf("cpu.max at share 1: %q, want the original", got)
	}
	if err := th.set(0.5); err != nil {
		t.Fatal(err)
	}
	if err := th.close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cpuMax); got != "max 100000" {
		t.Errorf("cpu.max after close: %q, want the original", got)
	}
}

func TestCgroupFallsBackToTheDutyCycle(t *testing.T) {
	procCgroup, root, cpuMax := fakeCgroup(t, 42)
	cg, err := findCgroupCPU(procCgroup, root, 42, 1)
	if err != nil {
		t.Fatal(err)
	}
	th := newCPUThrottle(cg)
	if err := os.Remove(cpuMax); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cpuMax, 0o755); err != nil { // unwritable, even for root
		t.Fatal(err)
	}
	if err := th.set(0.5); err == nil || !strings.Contains(err.Error(), "duty cycle") {
		t.Errorf("a failed cgroup write: %v, want an error saying it falls back", err)
	}
	if share, mode := th.state(); share != 0.5 || mode != api.CPUShareDutyCycle {
		t.Errorf("after the fallback: %g %s, want 0.5 duty-cycle", share, mode)
	}
}

func TestNoCgroupWhenTheDaemonMayNotWriteIt(t *testing.T) {
	t.Run("shared", func(t *testing.T) {
		procCgroup, root, _ := fakeCgroup(t, 42, "43")
		if _, err := findCgroupCPU(procCgroup, root, 42, 1); err == nil || !strings.Contains(err.Error(), "shares its cgroup") {
			t.Errorf("a cgroup with another process: %v", err)
		}
	})
	t.Run("no cpu controller", func(t *testing.T) {
		procCgroup, root, cpuMax := fakeCgroup(t, 42)
		os.Remove(cpuMax)
		if _, err := findCgroupCPU(procCgroup, root, 42, 1); err == nil || !strings.Contains(err.Error(), "cpu controller") {
			t.Errorf("no cpu.max: %v", err)
		}
	})
	for name, content := range map[string]string{
		"cgroup v1": "4:memory:/x\n1:cpu,cpuacct:/\n0::/\n", // this sandbox's kind
		"root":      "0::/\n",
		"no v2":     "1:cpu:/\n",
		"garbage":   "nonsense\n",
	} {
		t.Run(name, func(t *testing.T) {
			procCgroup, root, _ := fakeCgroup(t, 42)
			if err := os.WriteFile(procCgroup, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if cg, err := findCgroupCPU(procCgroup, root, 42, 1); err == nil {
				t.Errorf("%q: found %+v", content, cg)
			}
		})
	}
}

// TestThrottledNodesSleepAfterEveryStep runs the two-stage job on a node
// whose file says cpu_share 0.5 and on one throttled live to 0.25 through
// the coordinator: both report their share back, and each sleeps after
// every one of its stage's steps.
func TestThrottledNodesSleepAfterEveryStep(t *testing.T) {
	cl := startCluster(t)
	var sleepA, sleepB fakeSleeper
	cl.startNodeWith(Config{Name: "a", Type: "cpu", CPUShare: 0.5}, sleepA.sleep)
	cl.startNodeWith(Config{Name: "b", Type: "gpu"}, sleepB.sleep)
	cl.waitNodes(2)
	a, b := cl.nodeNamed("a"), cl.nodeNamed("b")
	if a.CPUShare != 0.5 || a.CPUShareMode != api.CPUShareDutyCycle || b.CPUShare != 1 || b.CPUShareMode != api.CPUShareNone {
		t.Fatalf("registered shares: a %g %s, b %g %s", a.CPUShare, a.CPUShareMode, b.CPUShare, b.CPUShareMode)
	}

	var s api.NodeStatus
	cl.do(http.MethodPost, "/v1/nodes/b/throttle", api.ContentTypeJSON, []byte(`{"cpu_share": 0.25}`), &s)
	deadline := time.Now().Add(patience)
	for b = cl.nodeNamed("b"); b.CPUShare != 0.25; b = cl.nodeNamed("b") {
		if time.Now().After(deadline) {
			t.Fatalf("node b does not report the throttle: %+v", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b.CPUShareMode != api.CPUShareDutyCycle {
		t.Errorf("node b's mode %q", b.CPUShareMode)
	}

	job := cl.waitJob(cl.submit("testdata/job.toml"), final)
	if job.State != api.JobDone {
		t.Fatalf("job %s: %s", job.State, job.Reason)
	}
	for name, f := range map[string]*fakeSleeper{"a": &sleepA, "b": &sleepB} {
		got := f.sleeps()
		if int64(len(got)) != job.Steps {
			t.Errorf("node %s slept %d times in %d steps", name, len(got), job.Steps)
		}
		for i, d := range got {
			if d <= 0 {
				t.Errorf("node %s: sleep %d of %s", name, i, d)
			}
		}
	}
}

// startNodeWith runs a node daemon with cfg (on loopback, one unit) whose
// duty cycle sleeps with sleep, until the test ends.
func (cl *cluster) startNodeWith(cfg Config, sleep func(context.Context, time.Duration) bool) {
	cl.t.Helper()
	cfg = cl.onLoopback(cfg, cl.base)
	a, err := New(cfg)
	if err != nil {
		cl.t.Fatal(err)
	}
	a.throttle.cgroup = nil // the duty cycle, wherever the test runs
	a.throttle.sleep = sleep
	cl.wg.Go(func() {
		if err := a.Run(cl.ctx); err != nil {
			cl.t.Errorf("node %s: %v", cfg.Name, err)
		}
	})
}

func (cl *cluster) nodeNamed(name string) api.NodeStatus {
	cl.t.Helper()
	var nodes []api.NodeStatus
	cl.do(http.MethodGet, "/v1/nodes", "", nil, &nodes)
	for _, n := range nodes {
		if n.Name == name && n.State == api.NodeAlive {
			return n
		}
	}
	cl.t.Fatalf("no live node %s in %+v", name, nodes)
	return api.NodeStatus{}
}

func TestNodeFileShareReachesTheConfig(t *testing.T) {
	n, err := config.ParseNode("node.toml", []byte(`version = 1
name = "slow"
coordinator = "http://127.0.0.1:7070"
listen = "127.0.0.1:0"
ps_listen = "127.0.0.1:0"
type = "cpu"
units = 1
plain = true
cpu_share = 0.25
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromFile(n)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CPUShare != 0.25 {
		t.Errorf("Config.CPUShare %g, want the file's 0.25", cfg.CPUShare)
	}
}

// TestBusyTimeIsTheMeanAtTheCurrentBatch: the compute time a replica
// reports is the mean of its last steps at its current batch and CPU
// share; a new batch or a new share starts the mean again.
func TestBusyTimeIsTheMeanAtTheCurrentBatch(t *testing.T) {
	var b busyTime
	for i := range 20 {
		b.add(time.Duration(i+1)*time.Millisecond, 64, 1)
	}
	if got, want := b.add(21*time.Millisecond, 64, 1), 0.0175; math.Abs(got-want) > 1e-12 { // steps 14..21
		t.Errorf("mean of the last %d steps: %g s, want %g", busyWindow, got, want)
	}
	if got := b.add(100*time.Millisecond, 32, 1); got != 0.1 {
		t.Errorf("first step at a new batch: %g s, want 0.1 (the old batch's steps dropped)", got)
	}
	if got := b.add(300*time.Millisecond, 32, 0.25); got != 0.3 {
		t.Errorf("first step at a new CPU share: %g s, want 0.3 (the old share's steps dropped)", got)
	}
}
