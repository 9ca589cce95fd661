//go:build !linux

package main

// allowedCPUs knows no CPUs off Linux, where node daemons are not pinned.
func allowedCPUs() []int { return nil }
