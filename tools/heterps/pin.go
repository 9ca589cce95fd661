package main

import (
	"slices"

	"github.com/heterps/heterps/config"
)

// pinOffers gives each node daemon of a run on this machine as many of
// the allowed CPUs as its units have threads, dealt in turn (daemon k
// after daemon k-1's), round again where the daemons' threads outnumber
// the CPUs; a daemon with as many threads as there are CPUs, or with no
// CPUs known, is not pinned (""). Measured on the 2-core Intel Xeon VM
// with a 3,000-step ctrdnn job, alternated pairs, 3 of 3 each: two
// one-thread daemons trained 97.1-100.7k samples/s pinned against
// 88.0-94.1k, four 68.0-76.6k against 63.5-69.3k. A pinned daemon keeps
// its core and its caches, and the other daemons' threads stay off it.
func pinOffers(offers []offer, allowed []int) []string {
	out := make([]string, len(offers))
	next := 0
	for i, o := range offers {
		n := o.units * max(o.threads, 1)
		if n >= len(allowed) {
			continue
		}
		cpus := make([]int, n)
		for k := range cpus {
			cpus[k] = allowed[(next+k)%len(allowed)]
		}
		slices.Sort(cpus)
		out[i] = config.FormatCPUList(cpus)
		next += n
	}
	return out
}
