package cpuset

import (
	"os"
	"runtime"
	"sync"
)

// A Go P for the messages. A node daemon computes on its CPUs and, where
// it hosts a parameter-server shard or its stage exchanges with other
// processes (replicas, stages, remote shards), also has messages to take
// while it computes. A stage's kernels hold a P through every kernel call
// on each of its lanes (the main lane, and the side lane of a backend of
// two or more threads, asleep in the kernel between passes); with no P
// left over, a message that arrives waits until a lane blocks, or until
// the runtime takes a P back (up to 10 ms when its monitor idles): a ring
// reduction started as backward leaves a layer then runs after the whole
// backward. One P more lets the messages' goroutines run at once.
//
// Serving (a shard's daemon) takes the extra P in a pinned process only:
// there GOMAXPROCS is its CPUs, and its one-thread stage's lane holds all
// of them. A daemon that serves no one pays for the P: its runtime wakes a
// second thread for every message, and on two cores that thread takes
// turns with the other daemons' compute. On the 2-core Intel VM, four
// one-core nodes of an allreduce job ran 1.01-1.06x faster with the extra
// P on the shard's daemon only than with it on all four (13 alternated
// pairs, median 1.03x; a ps-synced job 0.98-0.99x over 3 pairs); two
// nodes, BSP and asynchronous, moved within the noise, and without the
// extra P anywhere the asynchronous pair ran at 0.64x.
//
// Exchanging (a stage of two lanes that waits on other processes) makes
// sure of one P more than the lanes of such stages together, pinned or
// not: two 2-thread nodes of an allreduce
// job on the 2-core Zen 4 VM (GOMAXPROCS 2 each, the lanes' count), whose
// ring goroutines had waited 7-8 ms a step for a P, ran a median 1.07x
// faster at GOMAXPROCS 3 (10 alternated pairs, 9 faster) and 1.02-1.03x
// with Exchanging (14 pairs, 9 faster; 1.00x against GOMAXPROCS 3 head to
// head over 6). A node of more CPUs
// than lanes already has the P, and one whose stage waits on no one (make
// run's single node) is better without it: the servers' work there is
// the step's own, and a third P only lets it contend with the lanes
// (91-93k against 102-107k samples/s on the Xeon VM).

// procState is what sets the process's GOMAXPROCS: Pin, Serving and
// Exchanging.
type procState struct {
	pinned     int          // the GOMAXPROCS Pin set: its CPUs; 0 when none was set
	serving    int          // Serving's holders
	exchanging map[*int]int // Exchanging's holders: each one's lanes
	unpinned   int          // an unpinned process's GOMAXPROCS before Exchanging raised it; 0: not raised
}

var procs = struct {
	sync.Mutex
	procState
}{procState: procState{exchanging: map[*int]int{}}}

// setPinnedProcs records the GOMAXPROCS that Pin set (0: none), keeping
// the Ps that Serving and Exchanging hold.
func setPinnedProcs(n int) {
	procs.Lock()
	defer procs.Unlock()
	procs.pinned = n
	procs.apply()
}

// Serving gives a process that Pin pinned one Go P more than its CPUs
// until the returned function is called (by every holder: the P goes once
// the last lets go). It changes nothing in a process that Pin did not
// pin, or whose GOMAXPROCS the GOMAXPROCS variable set.
func Serving() (done func()) {
	procs.Lock()
	defer procs.Unlock()
	procs.serving++
	procs.apply()
	return once(func() { procs.serving-- })
}

// Exchanging makes sure the process runs Go on at least one P more than
// the lanes of every holder together until the returned function is
// called: one for each lane of a stage and one for the messages its
// stages exchange with other processes. An unpinned process gets its
// GOMAXPROCS from before back once the last holder lets go. It changes
// nothing where the GOMAXPROCS variable is set.
func Exchanging(lanes int) (done func()) {
	procs.Lock()
	defer procs.Unlock()
	key := new(int)
	procs.exchanging[key] = lanes
	procs.apply()
	return once(func() { delete(procs.exchanging, key) })
}

// once returns a function that runs release under procs' lock and applies
// the result, the first time it is called only.
func once(release func()) func() {
	var o sync.Once
	return func() {
		o.Do(func() {
			procs.Lock()
			defer procs.Unlock()
			release()
			procs.apply()
		})
	}
}

// apply sets GOMAXPROCS from the state; procs is locked.
func (p *procState) apply() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	base := p.pinned
	if base == 0 {
		base = p.unpinned
		if base == 0 {
			base = runtime.GOMAXPROCS(0)
		}
	}
	want := base
	if p.serving > 0 && p.pinned > 0 {
		want = base + 1
	}
	if len(p.exchanging) > 0 {
		lanes := 0
		for _, n := range p.exchanging {
			lanes += n
		}
		want = max(want, lanes+1)
	}
	switch {
	case p.pinned > 0:
		p.unpinned = 0
	case want > base:
		p.unpinned = base
	case p.unpinned == 0:
		return // never raised: leave the runtime's own GOMAXPROCS be
	default:
		p.unpinned = 0
		restoreProcs(base)
		return
	}
	runtime.GOMAXPROCS(want)
}

// restoreProcs gives an unpinned process its GOMAXPROCS of before back:
// the runtime's default where that is it, so that the runtime follows the
// CPUs and the cgroup's quota again, else the value itself (a test run's
// -cpu).
func restoreProcs(before int) {
	runtime.SetDefaultGOMAXPROCS()
	if runtime.GOMAXPROCS(0) != before {
		runtime.GOMAXPROCS(before)
	}
}

// PinServing is Pin for a process that serves others for good while it
// computes (a profile's replica that hosts the shard): it is Serving from
// the start and never lets go.
func PinServing(cpus []int) error {
	if err := Pin(cpus); err != nil {
		return err
	}
	Serving()
	return nil
}
