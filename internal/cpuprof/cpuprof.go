// Package cpuprof starts a CPU profile for the benchmark commands'
// --cpuprofile flags.
package cpuprof

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// Start writes a CPU profile to path until the returned stop is called.
// An empty path profiles nothing and stop does nothing.
func Start(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); out.Close() }, nil
}
