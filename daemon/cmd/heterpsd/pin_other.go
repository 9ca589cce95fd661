//go:build !linux

package main

import (
	"errors"
	"fmt"
)

var errPinLinux = errors.New("pinning a node daemon to CPUs needs Linux")

// pinProcess is Linux's only (pin_linux.go).
func pinProcess([]int) error { return fmt.Errorf("cpus: %w", errPinLinux) }

// cpuSet is Linux's only (pin_linux.go).
func cpuSet([]int) (struct{}, error) { return struct{}{}, errPinLinux }
