package node

import (
	"runtime"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/cpuset"
)

// The compute thread. A stage task runs its kernels on its own goroutine,
// while the wire transport, the parameter-server service and the ring
// reductions run on others. On a node whose cores are all computing, a
// message that arrives must wait for the scheduler to preempt a kernel
// thread, and Linux's fair scheduler lets a running thread of equal weight
// finish its slice (about 1.5 ms on 2 CPUs) first; a BSP step waits on
// several such hand-offs, each peer's in turn. runStage therefore runs on
// a goroutine locked to its OS thread, whose nice value it raises by
// Config.ComputeNice: a thread woken by the network now preempts it at
// once. On a 2-core VM, a 2-node ctrdnn job's forward waited 2.3-4.0 ms a
// step for its parameters at equal priority and 1.2-2.4 ms at nice 5, 10
// or 19.
//
// A task that waits on no other process — one stage of one replica, its
// parameter servers all in this daemon — keeps the daemon's priority:
// there the threads it would yield to are its own pulls, pushes and input,
// and make run's job (one 2-thread node) lost 1-9 % at nice 10. It still
// runs on a thread of its own: unbound, its goroutine resumed from each
// wait on whichever thread the Go scheduler handed it, and make run's job
// ran a median 2 % slower than bound (20 alternated pairs on the Zen 4 VM,
// the bound one faster in 16; native.CPU.PinCaller binds the side lane
// too). Nor does
// such a task overlap its steps (pipeline.Config.OverlapSteps): overlap
// hides the wait for other processes behind the next forward, but with
// nothing to wait for, the servers' update and the next rows' pulls only
// contend with that forward's split kernels for the cores — make run's job
// on a 2-core Zen 5 VM: 124.2k against 115.7k samples/s (means of 8
// alternated pairs, the overlapping one faster in 2), the loss the same
// bits. Both choices are made when the task starts.
//
// The thread is never unlocked, so it exits with the task and its
// priority with it (were it the process's main thread, which cannot exit,
// Go parks it for good: it runs nothing more). While a goroutine is locked
// to a thread, the Go runtime starts new threads from its template thread,
// so no other goroutine inherits the priority; the kernels' helper threads
// (native's pool) take the priority of whichever thread first runs a split
// kernel in the process.

// onComputeThread locks the calling goroutine to its thread and lowers
// the thread's priority by a.cfg.ComputeNice, once per task goroutine,
// saying in the task's log when it cannot; the priority stays with
// ComputeNice 0 or for a task that waits on no other process.
func (a *Agent) onComputeThread(t *task) {
	runtime.LockOSThread() // never undone: see above
	if a.cfg.ComputeNice == 0 || !a.waitsOnOthers(t.spec) {
		return
	}
	if _, err := cpuset.LowerThreadPriority(a.cfg.ComputeNice); err != nil {
		a.taskLog(t.spec).Warn("the stage's kernels run at the daemon's priority", "err", err)
	}
}

// waitsOnOthers reports whether task s synchronises with other processes:
// replicas of its stage, other stages, or parameter-server shards that
// another daemon hosts.
func (a *Agent) waitsOnOthers(s api.Task) bool {
	if s.Replicas > 1 || len(s.Layout) > 1 {
		return true
	}
	for _, addr := range s.PS {
		if addr != a.psAddr {
			return true
		}
	}
	return false
}
