package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/shirou/gopsutil/v4/mem"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ps"
)

// errNoRoom: a checkpoint given up because neither a copy of the shards
// nor a write in place fits.
var errNoRoom = errors.New("not written")

// checkpointRoom is ps.SnapshotShardsWithin's room for the job's
// checkpoint of step on this node. A copy where it fits (copyFits); else
// the shards are written in place, training waiting for the disk, where
// that wait fits within half the workers' request timeout at the speed of
// this node's last checkpoint write (inPlaceHoldLimit), or where nothing
// trains any more (the last step); else the checkpoint is given up
// (errNoRoom) and reported as not written, saying why, and the next is
// tried at its step. It stores the size of a copy in copied.
func (a *Agent) checkpointRoom(spec api.Task, step int64, shards []*ps.Shard, w *checkpointWriter, copied *int64) func(int64) (bool, error) {
	return func(need int64) (bool, error) {
		var held int64
		for _, s := range shards {
			held += s.Bytes()
		}
		ok, why := copyFits(need, w.pending.Load(), held, a.cfg.PSMemory*int64(len(shards)), availableMemory())
		if ok {
			*copied = need
			return true, nil
		}
		hold := time.Duration(float64(need) / float64(writeRate(w.rate.Load())) * float64(time.Second))
		if limit := inPlaceHoldLimit(a.cfg.StepTimeout); step < spec.Steps && hold > limit {
			return false, fmt.Errorf("%w: %s, and writing it in place would hold training about %s, past %s (half the workers' wait for the parameter servers); give the node more memory",
				errNoRoom, why, hold.Round(time.Second), limit)
		}
		a.obs.checkpointInPlace()
		a.log.Warn("ps: checkpoint written in place, training waits for the disk: "+why, "job", spec.JobID, "step", step,
			"copy_bytes", need, "expected_hold", hold.Round(time.Millisecond))
		return false, nil
	}
}

// writeRate is the speed a checkpoint write is expected to go at: the last
// one's, or 100 MB/s before any.
func writeRate(last int64) int64 {
	if last > 0 {
		return last
	}
	return 100 << 20
}

// inPlaceHoldLimit is the longest a checkpoint written in place may hold
// training: half the workers' request timeout to the parameter servers
// (the node's step timeout, a minute by default). A variable so that tests can refuse every
// hold.
var inPlaceHoldLimit = func(stepTimeout time.Duration) time.Duration {
	if stepTimeout <= 0 {
		stepTimeout = time.Minute
	}
	return stepTimeout / 2
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
