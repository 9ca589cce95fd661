// Package threadtest tells, for tests, whether a goroutine stays on one
// OS thread (runtime.LockOSThread) through waits that would otherwise let
// the Go scheduler resume it on another, and what another goroutine runs
// (GoroutineStack).
package threadtest
