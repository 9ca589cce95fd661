package cpuset

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/heterps/heterps/config"
)

// Allowed lists the CPUs this process may run on, ascending.
func Allowed() ([]int, error) {
	set, err := allowed()
	if err != nil {
		return nil, err
	}
	return list(set), nil
}

// Check reports whether this process may run on each of cpus, naming
// those it may when not.
func Check(cpus []int) error {
	_, err := setOf(cpus)
	return err
}

// Pin runs every thread of this process on cpus, and the threads started
// later too, since a new thread inherits the CPUs of the one that starts
// it; GOMAXPROCS becomes their count (one more while the process is
// Serving) unless the GOMAXPROCS variable says otherwise. A CPU this
// process may not run on is refused (Check).
func Pin(cpus []int) error {
	if err := pinAll(cpus); err != nil {
		return err
	}
	if os.Getenv("GOMAXPROCS") == "" {
		setPinnedProcs(len(cpus))
	}
	return nil
}

// pinAll runs every thread of this process on cpus.
func pinAll(cpus []int) error {
	set, err := setOf(cpus)
	if err != nil {
		return err
	}
	return pinThreads(set)
}

// Restrict runs every thread of this process on cpus, as Pin does (the
// GOMAXPROCS variable aside, GOMAXPROCS becomes their count; Serving
// leaves it be), and returns
// what gives every thread the CPUs the calling thread had before, with
// GOMAXPROCS as it was (a benchmark running a 1-thread trainer on one
// CPU of several).
func Restrict(cpus []int) (restore func() error, err error) {
	old, err := allowed()
	if err != nil {
		return nil, err
	}
	before := runtime.GOMAXPROCS(0)
	if err := pinAll(cpus); err != nil {
		return nil, err
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(len(cpus))
	}
	return func() error {
		defer runtime.GOMAXPROCS(before)
		return pinThreads(old)
	}, nil
}

// PinThread runs the calling thread on the n-th (modulo their count) of
// the CPUs it may run on, and returns what gives the thread its CPUs
// back. The caller keeps its goroutine on the thread meanwhile
// (runtime.LockOSThread).
func PinThread(n int) (restore func(), err error) {
	old, err := allowed()
	if err != nil {
		return nil, err
	}
	cpus := list(old)
	if len(cpus) == 0 {
		return nil, errors.New("this thread may run on no CPU")
	}
	return pinThreadFrom(old, cpus[n%len(cpus)])
}

// PinThreadTo runs the calling thread on CPU cpu alone, as PinThread does.
func PinThreadTo(cpu int) (restore func(), err error) {
	old, err := allowed()
	if err != nil {
		return nil, err
	}
	return pinThreadFrom(old, cpu)
}

func pinThreadFrom(old *unix.CPUSet, cpu int) (restore func(), err error) {
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return nil, fmt.Errorf("pinning this thread to CPU %d: %w", cpu, err)
	}
	return func() { _ = unix.SchedSetaffinity(0, old) }, nil
}

func allowed() (*unix.CPUSet, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading the CPUs this process may run on: %w", err)
	}
	return &set, nil
}

// setOf is cpus as a CPU set, when this process may run on each of them.
func setOf(cpus []int) (*unix.CPUSet, error) {
	ok, err := allowed()
	if err != nil {
		return nil, err
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if !ok.IsSet(c) {
			return nil, fmt.Errorf("CPU %d is not one this process may run on (%s)", c, config.FormatCPUList(list(ok)))
		}
		set.Set(c)
	}
	return &set, nil
}

// pinThreads sets the CPUs of every thread of this process, in two passes:
// the second catches threads started during the first.
func pinThreads(set *unix.CPUSet) error {
	for range 2 {
		if err := pinThreadsOnce(set); err != nil {
			return err
		}
	}
	return nil
}

func pinThreadsOnce(set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing this process's threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pinning thread %d: %w", tid, err)
		}
	}
	return nil
}

// list lists the CPUs in set, ascending.
func list(set *unix.CPUSet) []int {
	var out []int
	for c := range config.MaxCPU {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// LowerThreadPriority locks the calling goroutine to its OS thread for
// good and raises that thread's nice value by by (up to 19), returning the
// value it set. The goroutine must not unlock it: the thread then exits
// with the goroutine, and its priority with it.
func LowerThreadPriority(by int) (int, error) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, fmt.Errorf("read the thread's priority: %w", err)
	}
	nice := min(20-raw+by, 19) // the system call answers 20 - nice
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
		return 0, fmt.Errorf("set the thread's nice to %d: %w", nice, err)
	}
	return nice, nil
}

// ThreadNice reads the nice value of thread tid of this process, 0 for
// the calling one, from /proc.
func ThreadNice(tid int) (int, error) {
	path := "/proc/thread-self/stat"
	if tid != 0 {
		path = fmt.Sprintf("/proc/self/task/%d/stat", tid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // past the command's name
	if len(fields) < 17 {
		return 0, fmt.Errorf("%s: %d fields after the command, want 17 or more", path, len(fields))
	}
	nice, err := strconv.Atoi(fields[16]) // the 19th of the line
	if err != nil {
		return 0, fmt.Errorf("%s: nice: %w", path, err)
	}
	return nice, nil
}

// ThreadID is the calling thread's id (what ThreadNice takes).
func ThreadID() int { return unix.Gettid() }

// Yield offers the calling thread's CPU to another thread runnable there
// (sched_yield), without going through the Go scheduler: for a goroutine
// bound to its thread that spins while it waits.
func Yield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
