package main

import (
	"golang.org/x/sys/unix"

	"github.com/heterps/heterps/config"
)

// allowedCPUs lists the CPUs this process may run on, ascending; nil when
// they cannot be read.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var out []int
	for c := range config.MaxCPU {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}
