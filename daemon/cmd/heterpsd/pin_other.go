//go:build !linux

package main

import "errors"

// pinProcess is Linux's only (pin_linux.go).
func pinProcess([]int) error { return errors.New("cpus: pinning a node daemon to CPUs needs Linux") }
