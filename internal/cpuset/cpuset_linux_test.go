package cpuset

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/heterps/heterps/config"
)

const pinChildEnv = "HETERPS_CPUSET_PIN_CHILD"

// TestPinPinsEveryThread: a process pinned to a CPU runs every thread
// there, those it starts afterwards included, with GOMAXPROCS 1;
// a CPU it may not run on is refused. The pinning runs in a child
// process, so that this one keeps its CPUs.
func TestPinPinsEveryThread(t *testing.T) {
	if os.Getenv(pinChildEnv) != "" {
		pinChild(t)
		return
	}
	cpu := lastCPU(t)
	out := inChild(t, "TestPinPinsEveryThread", fmt.Sprintf("%s=%d", pinChildEnv, cpu), "GOMAXPROCS=")
	threads := 0
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "THREAD "); ok {
			threads++
			if _, cpus, _ := strings.Cut(rest, " "); cpus != fmt.Sprint(cpu) {
				t.Errorf("thread %s", rest)
			}
		}
	}
	if threads < 6 || !strings.Contains(out, "GOMAXPROCS 1\n") {
		t.Fatalf("%d threads seen, want the 4 started after pinning and the runtime's; child:\n%s", threads, out)
	}
	err := Pin([]int{config.MaxCPU - 1})
	if err == nil || !strings.Contains(err.Error(), "is not one this process may run on") {
		t.Fatalf("pinning to CPU %d: %v", config.MaxCPU-1, err)
	}
}

const serveChildEnv = "HETERPS_CPUSET_SERVE_CHILD"

// TestPinServingKeepsAPForServing: a serving process pinned to a CPU runs
// Go on 2 Ps (its compute goroutine's and one for the goroutines serving
// others), unless the GOMAXPROCS variable says otherwise; in a child
// process, so that this one keeps its CPUs.
func TestPinServingKeepsAPForServing(t *testing.T) {
	if cpu := os.Getenv(serveChildEnv); cpu != "" {
		n, _ := strconv.Atoi(cpu)
		if err := PinServing([]int{n}); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("GOMAXPROCS %d ALLOWED %v\n", runtime.GOMAXPROCS(0), must(Allowed()))
		return
	}
	cpu := lastCPU(t)
	for env, want := range map[string]string{"GOMAXPROCS=": "GOMAXPROCS 2 ", "GOMAXPROCS=3": "GOMAXPROCS 3 "} {
		out := inChild(t, "TestPinServingKeepsAPForServing", fmt.Sprintf("%s=%d", serveChildEnv, cpu), env)
		if !strings.Contains(out, want+fmt.Sprintf("ALLOWED [%d]", cpu)) {
			t.Errorf("%s: want %q on CPU %d; child:\n%s", env, want, cpu, out)
		}
	}
}

// TestServingAddsAPWhileHeld: a process that Pin pinned to a CPU runs Go
// on 1 P, on 2 while anything holds Serving (two holders, released one at
// a time, one of them twice), and on 1 again once none does; with the
// GOMAXPROCS variable set, neither changes it. In an unpinned process
// Serving changes nothing.
func TestServingAddsAPWhileHeld(t *testing.T) {
	if procsWhenPinned(t, "TestServingAddsAPWhileHeld", []int{1, 2, 2, 1}, func(seen func()) {
		first, second := Serving(), Serving()
		seen()
		first()
		first()
		seen()
		second()
		seen()
	}) {
		return
	}
	before := runtime.GOMAXPROCS(0)
	Serving()()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("unpinned: GOMAXPROCS %d after Serving, %d before", got, before)
	}
}

// TestExchangingKeepsAPBeyondTheLanes: Exchanging runs Go on at least one
// P more than its holders' lanes together, and gives the GOMAXPROCS of
// before back once none holds it. Pinned to one CPU a process goes from 1
// P to 3 for two lanes, stays at 3 with Serving held too and at 2 with
// Serving alone, and back to 1; unpinned, it goes to lanes+1 where it had
// fewer, to 2 more for a second holder of two lanes, back as they let
// go; with the GOMAXPROCS variable set nothing changes.
func TestExchangingKeepsAPBeyondTheLanes(t *testing.T) {
	if procsWhenPinned(t, "TestExchangingKeepsAPBeyondTheLanes", []int{1, 3, 2, 1}, func(seen func()) {
		exchange, serve := Exchanging(2), Serving()
		seen()
		exchange()
		exchange()
		seen()
		serve()
		seen()
	}) {
		return
	}
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	before := runtime.GOMAXPROCS(0)
	lanes := before + 1 // more than this process has Ps
	first := Exchanging(lanes)
	if got := runtime.GOMAXPROCS(0); got != lanes+1 {
		t.Errorf("unpinned, %d Ps, Exchanging(%d): GOMAXPROCS %d, want %d", before, lanes, got, lanes+1)
	}
	second := Exchanging(2)
	if got := runtime.GOMAXPROCS(0); got != lanes+3 {
		t.Errorf("unpinned, Exchanging(%d) and Exchanging(2): GOMAXPROCS %d, want %d", lanes, got, lanes+3)
	}
	first()
	if got := runtime.GOMAXPROCS(0); got != max(before, 3) {
		t.Errorf("unpinned, Exchanging(2) left: GOMAXPROCS %d, want %d", got, max(before, 3))
	}
	second()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("unpinned, every holder gone: GOMAXPROCS %d, want %d as before", got, before)
	}
}

const procsChildEnv = "HETERPS_CPUSET_PROCS_CHILD"

// procsWhenPinned runs test again in a child process pinned to this
// process's last CPU (so that this one keeps its CPUs), once as it is and
// once with the GOMAXPROCS variable set to 5. The child records
// GOMAXPROCS once pinned and wherever steps calls seen, and the lists must
// be want and all 5s. It reports whether this is the child, whose caller
// then returns.
func procsWhenPinned(t *testing.T, test string, want []int, steps func(seen func())) (child bool) {
	t.Helper()
	if cpu := os.Getenv(procsChildEnv); cpu != "" {
		n, _ := strconv.Atoi(cpu)
		if err := Pin([]int{n}); err != nil {
			t.Fatal(err)
		}
		procs := []int{runtime.GOMAXPROCS(0)}
		steps(func() { procs = append(procs, runtime.GOMAXPROCS(0)) })
		fmt.Printf("PROCS %v\n", procs)
		return true
	}
	fixed := slices.Repeat([]int{5}, len(want))
	pinTo := fmt.Sprintf("%s=%d", procsChildEnv, lastCPU(t))
	for env, want := range map[string][]int{"GOMAXPROCS=": want, "GOMAXPROCS=5": fixed} {
		if out := inChild(t, test, pinTo, env); !strings.Contains(out, fmt.Sprintf("PROCS %v\n", want)) {
			t.Errorf("%s: want PROCS %v; child:\n%s", env, want, out)
		}
	}
	return false
}

// lastCPU is the last CPU this process may run on.
func lastCPU(t *testing.T) int {
	t.Helper()
	cpus, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	return cpus[len(cpus)-1]
}

// inChild runs test in a child process of this test binary, with env
// added to this one's, and returns its output.
func inChild(t *testing.T, test string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return string(out)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// pinChild pins this process to the CPU its parent named, starts threads
// and prints each thread's CPUs and GOMAXPROCS.
func pinChild(t *testing.T) {
	var cpu int
	fmt.Sscan(os.Getenv(pinChildEnv), &cpu)
	if err := Pin([]int{cpu}); err != nil {
		t.Fatal(err)
	}
	var started, hold sync.WaitGroup
	hold.Add(1)
	for range 4 { // threads of their own, started after the pinning
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			started.Done()
			hold.Wait()
		}()
	}
	started.Wait()
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, status := range tasks {
		src, err := os.ReadFile(status)
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.Lines(string(src)) {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				fmt.Printf("THREAD %s %s\n", filepath.Base(filepath.Dir(status)), strings.TrimSpace(v))
			}
		}
	}
	fmt.Printf("GOMAXPROCS %d\n", runtime.GOMAXPROCS(0))
	hold.Done()
}

// TestRestrictAndRestore: Restrict narrows every thread to the CPUs given
// and GOMAXPROCS to their count; its restore gives every thread the CPUs
// it had and GOMAXPROCS back, though the narrowed set no longer holds them.
func TestRestrictAndRestore(t *testing.T) {
	cpus, err := Allowed()
	if err != nil || len(cpus) < 2 {
		t.Skipf("restricting needs 2 CPUs: %v, %v", cpus, err)
	}
	procs := runtime.GOMAXPROCS(0)
	restore, err := Restrict(cpus[:1])
	if err != nil {
		t.Fatal(err)
	}
	narrowed := threadCPUs(t)
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	for tid, got := range narrowed {
		if got != fmt.Sprint(cpus[:1]) {
			t.Errorf("restricted: thread %d may run on %s, want %v", tid, got, cpus[:1])
		}
	}
	for tid, got := range threadCPUs(t) {
		if got != fmt.Sprint(cpus) {
			t.Errorf("restored: thread %d may run on %s, want %v", tid, got, cpus)
		}
	}
	if runtime.GOMAXPROCS(0) != procs {
		t.Errorf("GOMAXPROCS %d after restoring, want %d", runtime.GOMAXPROCS(0), procs)
	}
}

// threadCPUs is the CPUs each thread of this process may run on.
func threadCPUs(t *testing.T) map[int]string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, task := range tasks {
		var tid int
		fmt.Sscan(task.Name(), &tid)
		var set unix.CPUSet
		if unix.SchedGetaffinity(tid, &set) == nil {
			out[tid] = fmt.Sprint(list(&set))
		}
	}
	return out
}

func TestLowerThreadPriority(t *testing.T) {
	base, err := ThreadNice(0)
	if err != nil {
		t.Skipf("no thread nice: %v", err)
	}
	type outcome struct {
		set, read int
		err       error
	}
	lower := func(by int) outcome {
		done := make(chan outcome)
		go func() {
			set, err := LowerThreadPriority(by)
			read, _ := ThreadNice(0)
			done <- outcome{set, read, err}
		}() // exits locked: its thread ends with it
		return <-done
	}
	if o := lower(3); o.err != nil || o.set != min(base+3, 19) || o.read != o.set {
		t.Errorf("by 3 from %d: set %d, read %d, %v", base, o.set, o.read, o.err)
	}
	if o := lower(19); o.err != nil || o.set != 19 || o.read != 19 {
		t.Errorf("by 19 from %d: set %d, read %d, %v (want 19, the lowest)", base, o.set, o.read, o.err)
	}
	if now, _ := ThreadNice(0); now != base {
		t.Errorf("the test's own thread went from nice %d to %d", base, now)
	}
}

// TestLockToCPURestoresTheThread: LockToCPU binds the thread to one CPU,
// and unlock gives the thread its CPU set back.
func TestLockToCPURestoresTheThread(t *testing.T) {
	runtime.LockOSThread() // stay on this thread across the unpin
	defer runtime.UnlockOSThread()
	before := cpusOfThisThread(t)
	unpin := LockToCPU(1)
	if pinned := cpusOfThisThread(t); pinned.Count() != 1 {
		t.Errorf("pinned to %d CPUs", pinned.Count())
	}
	unpin()
	if after := cpusOfThisThread(t); after != before {
		t.Errorf("CPU set after unpinning: %d CPUs, before %d", after.Count(), before.Count())
	}
}

// cpusOfThisThread is the CPU set of the calling thread.
func cpusOfThisThread(t *testing.T) unix.CPUSet {
	set, err := allowed()
	if err != nil {
		t.Fatal(err)
	}
	return *set
}
