package coord

import (
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// AllreduceMinBytes is where dense_sync = "auto" switches a stage to
// allreduce: when the stage has at least two replicas and its dense
// parameters' bytes times its replicas reach it. Measured with
// pipeline.BenchmarkDenseSync on the 2-core development machine (loopback,
// loaded): one step's sync of a block of 64 KiB took 0.2-2.7 ms by the
// ring against 1.8-6.5 ms through a PS shard (2 and 4 replicas), 1 MiB
// 5-9 ms against 12-16 ms, 4 MiB 37-65 ms against 72-286 ms; the ring
// never lost. Small models stay on the servers all the same: there the
// difference is a fraction of a millisecond a step, and a PS-synced stage
// shrinks in place when a replica's node dies (allreduceMembersFixed).
const AllreduceMinBytes = 256 << 10

// denseSync is the method stage [first, last] with replicas replicas uses:
// the job file's, or for auto the one measured the faster on the stage's
// type (measured: the dense_sync its profile folded in, heterps profile
// --dense-sync auto), else the rule of AllreduceMinBytes (never for an
// ASP job). A stage of one replica keeps its dense parameters to itself
// (allreduce over a ring of one: the replica applies the optimiser, no
// round trip to the servers) unless the file names ps: it has no replica
// to lose in place, and `make run`'s one-node job ran 7 % faster so
// (4 of 4 alternated pairs, the same loss to the bit). A job restored from
// a checkpoint (restore, or an automatic restart) syncs as a new one
// would: an allreduce stage's replicas load the dense blocks' values and
// optimiser state from the servers, which restored them.
func denseSync(jf *config.Job, m *config.Model, first, last, replicas int, measured string) string {
	switch {
	case jf.DenseSync == config.DenseSyncAllreduce:
		return api.DenseSyncAllreduce
	case jf.DenseSync == config.DenseSyncPS && !jf.DenseSyncDefaulted:
		return api.DenseSyncPS
	case !jf.AllreduceAllowed():
		return api.DenseSyncPS
	case replicas < 2:
		return api.DenseSyncAllreduce
	case jf.DenseSync == config.DenseSyncPS:
		return api.DenseSyncPS
	}
	switch measured {
	case config.DenseSyncAllreduce:
		return api.DenseSyncAllreduce
	case config.DenseSyncPS:
		return api.DenseSyncPS
	}
	if denseBytes(m, first, last)*int64(replicas) >= AllreduceMinBytes {
		return api.DenseSyncAllreduce
	}
	return api.DenseSyncPS
}

// denseBytes is the size of the dense parameters of layers [first, last]:
// every layer's weights except the tables of embedding and NCE layers,
// which are sparse and stay on the parameter servers.
func denseBytes(m *config.Model, first, last int) int64 {
	var n int64
	for i, s := range m.Shapes() {
		if i < first || i > last || s.Kind == "embedding" || s.Kind == "nce" {
			continue
		}
		n += s.Weights
	}
	return 4 * n
}

// allreduceMembersFixed says why a job whose stage syncs by allreduce keeps
// its replicas: the replicas would have to agree on the step the ring
// changes at, and a step in flight when a replica dies cannot be finished
// without it (the parameter servers finish it for a PS-synced stage). A
// dead replica's node fails the job instead, which restarts from its
// latest checkpoint (through the servers) when the job file allows.
const allreduceMembersFixed = "a stage that syncs its dense parameters by allreduce cannot change its replicas in place yet (batches it can): use dense_sync = \"ps\", or checkpoint.restarts to restart after a node dies"

// syncsByAllreduce reports whether any stage of j syncs by allreduce.
func syncsByAllreduce(j *job) bool {
	for _, t := range j.tasks {
		for _, l := range t.task.Layout {
			if l.DenseSync == api.DenseSyncAllreduce {
				return true
			}
		}
		return false // every task carries the same layout
	}
	return false
}
