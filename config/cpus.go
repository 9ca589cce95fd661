package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers a CPU list names (the kernel's CPU sets
// hold up to 8192 on common builds; this is far above any one machine).
const MaxCPU = 1 << 13

// ParseCPUList reads a Linux CPU list such as "0", "0-3" or "0-3,8,10-11"
// (as in /sys/devices/system/cpu/online and taskset -c) into its CPUs,
// ascending, each once.
func ParseCPUList(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty CPU list")
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		first, err := cpuNumber(lo)
		if err != nil {
			return nil, err
		}
		last := first
		if isRange {
			if last, err = cpuNumber(hi); err != nil {
				return nil, err
			}
			if last < first {
				return nil, fmt.Errorf("CPU range %q runs backwards", part)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	if len(slices.Compact(slices.Clone(cpus))) != len(cpus) {
		return nil, fmt.Errorf("CPU list %q names a CPU twice", s)
	}
	return cpus, nil
}

// FormatCPUList writes cpus (ascending) as a CPU list, runs as ranges.
func FormatCPUList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func cpuNumber(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n >= MaxCPU {
		return 0, fmt.Errorf("%q is not a CPU number (0..%d)", s, MaxCPU-1)
	}
	return n, nil
}
