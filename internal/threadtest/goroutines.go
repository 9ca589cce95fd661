package threadtest

import (
	"runtime"
	"strings"
)

// GoroutineStack returns the stack of goroutine id (its number, as stack
// dumps print it) from a dump of every goroutine's, and whether that
// goroutine still runs.
func GoroutineStack(id string) (stack string, alive bool) {
	buf := make([]byte, 1<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	_, stack, alive = strings.Cut(all, "goroutine "+id+" [")
	stack, _, _ = strings.Cut(stack, "\ngoroutine ")
	return stack, alive
}
