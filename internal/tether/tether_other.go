//go:build !linux

package tether

import "os/exec"

// tie cannot tie a child to its parent off Linux.
func tie(*exec.Cmd) bool { return false }

func forkFromOneThread(<-chan request) {}
