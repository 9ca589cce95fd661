package node

import (
	"fmt"

	"github.com/shirou/gopsutil/v4/mem"

	"github.com/heterps/heterps/daemon/ps"
)

// copyRoom is ps.SnapshotShardsWithin's room for a job's checkpoints on
// this node: whether copies of need bytes fit (copyFits) beside the
// shards' state and the copies still waiting to be written (w). When they
// do, it stores need in copied; when they do not, it says why in the log:
// the checkpoint is then written in place, training waiting for the disk.
func (a *Agent) copyRoom(tasks []*task, shards []*ps.Shard, w *checkpointWriter, copied *int64) func(int64) bool {
	return func(need int64) bool {
		var held int64
		for _, s := range shards {
			held += s.Bytes()
		}
		ok, why := copyFits(need, w.pending.Load(), held, a.cfg.PSMemory*int64(len(shards)), availableMemory())
		if !ok {
			a.log.Warn("ps: checkpoint written in place, training waits for the disk: "+why, "job", tasks[0].spec.JobID, "copy_bytes", need)
			return false
		}
		*copied = need
		return true
	}
}

// copyFits says whether a checkpoint copy of need bytes fits: within
// budget (0: none), the shards' memory budget, beside the held bytes of
// their state and the pending copies still to be written; and within nine
// tenths of avail, the memory the machine has available (< 0: unknown).
// When it does not, why says so.
func copyFits(need, pending, held, budget, avail int64) (ok bool, why string) {
	if budget > 0 && held+pending+need > budget {
		return false, fmt.Sprintf("a copy of %s beside the shards' %s and %s of copies still being written exceeds their ps_memory of %s",
			mib(need), mib(held), mib(pending), mib(budget))
	}
	if avail >= 0 && need > avail-avail/10 {
		return false, fmt.Sprintf("a copy of %s does not fit in nine tenths of the %s this machine has available", mib(need), mib(avail))
	}
	return true, ""
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// availableMemory is the memory the machine has available for new
// allocations (MemAvailable), -1 when unknown; a variable so that tests
// can stand a full machine in.
var availableMemory = func() int64 {
	v, err := mem.VirtualMemory()
	if err != nil {
		return -1
	}
	return int64(v.Available)
}
