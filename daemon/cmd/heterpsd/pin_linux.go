package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/heterps/heterps/config"
)

// pinProcess runs every thread of this process on cpus (a node file's
// cpus), and the threads started later too, since a new thread inherits
// the CPUs of the one that starts it; GOMAXPROCS becomes their count
// unless the GOMAXPROCS variable says otherwise. A CPU this process may
// not run on is refused, naming those it may.
func pinProcess(cpus []int) error {
	set, err := cpuSet(cpus)
	if err != nil {
		return fmt.Errorf("cpus: %w", err)
	}
	for range 2 { // a second pass catches threads started during the first
		if err := pinThreads(set); err != nil {
			return err
		}
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(len(cpus))
	}
	return nil
}

// cpuSet is cpus as a CPU set, when this process may run on each of them.
func cpuSet(cpus []int) (*unix.CPUSet, error) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return nil, fmt.Errorf("reading the CPUs this process may run on: %w", err)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if !allowed.IsSet(c) {
			return nil, fmt.Errorf("CPU %d is not one this process may run on (%s)", c, config.FormatCPUList(cpuList(&allowed)))
		}
		set.Set(c)
	}
	return &set, nil
}

// pinThreads sets the CPUs of every thread of this process.
func pinThreads(set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("cpus: listing this process's threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("cpus: pinning thread %d: %w", tid, err)
		}
	}
	return nil
}

// cpuList lists the CPUs in set, ascending.
func cpuList(set *unix.CPUSet) []int {
	var out []int
	for c := range config.MaxCPU {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}
