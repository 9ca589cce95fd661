//go:build !linux

package threadtest

// Visited is 1 off Linux: threads are not told apart there.
func Visited(int) int { return 1 }
