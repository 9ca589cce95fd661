// Package node is the node role of heterpsd: it takes the inventory of its
// machine (cores and memory through gopsutil, GPUs through the CUDA driver
// when built with -tags cuda), registers with the coordinator, sends
// heartbeats that report its tasks, and runs the tasks the coordinator
// assigns in the replies: pipeline stage workers and parameter-server
// shards.
//
// # Listeners and addresses
//
// A node has two wire listeners, registered as data_addr and ps_addr. The
// first is a wire.TCPTransport whose node id is data_addr itself, so that
// the partner addresses a task lists (api.Task Prev and Next) are also the
// transport's peer ids; a partner is added as a peer while some task of
// this node needs it. The second serves the PS shards of every job with
// shards here: a ps.Service per job, chosen for each connection by the
// dialling client's node id ("psc/<job>/<task>"); a connection that comes
// before its job's shards are up waits for them (Config.ReadyTimeout), and
// a stage replica asks every shard of its job whether it is up before its
// first step, for as long as its task lasts (ps.Client.AwaitReady): a node
// restoring a large checkpoint takes as long as reading it.
//
// # Tasks
//
// Each heartbeat reply lists every task the node should run. New stage
// tasks start a goroutine each: the model is built on a CPU backend with
// units x threads threads, parameters live on the job's PS shards, stage 0
// reads shard data_shard of data_shards of the training split (read again
// whenever it ends), and the step loop reports step, loss and samples/s
// (measured after the first step). Before the first step a replica greets
// each partner on a stream beside the pair's EdgeStream: the transport
// turns away a dial from a peer it does not know yet, and its partner's
// task may arrive a heartbeat later, so each side sends until it hears the
// other. The PS tasks of a job share a goroutine that declares the job's
// parameters (pipeline.PSParams over the task's layout) and serves this
// node's shards. A task that leaves the reply is cancelled; a finished
// stage keeps its links until then, as a partner may still be reading its
// last messages.
//
// Run ends when its context does: it cancels the tasks, waits for them,
// reports the running ones failed in a last heartbeat, and closes its
// listeners.
//
// Checkpoints (BSP jobs): every checkpoint_every steps and after the last,
// a node fences its shards of the job at the step, writes their files
// into the step directory (ps.WriteShards) and reports each file's entry
// on its PS task; a node holding every shard also writes the manifest,
// otherwise the coordinator does once every shard has reported. A task
// with RestoreDir builds its shards from that checkpoint (ps.RestoreAs);
// stage replicas then run from FirstStep+1, stage 0 skipping the trained
// steps' batches.
//
// # CPU share
//
// To emulate a slower node on one machine, a node gives its work a share
// of its CPU (Config.CPUShare, the node file's cpu_share; 1 by default).
// It caps its own cgroup v2 through cpu.max (quota = share x its units x
// threads periods) when it is alone in a cgroup whose cpu.max it may
// write; otherwise each stage step sleeps (1/share - 1) x its compute
// time after computing (the duty cycle; throttle.go says what it counts).
// The node logs the share and the mode (cgroup, duty-cycle, or none at
// share 1; with the reason the cgroup is not used), registers them, and
// reports them in every heartbeat. A heartbeat reply with a cpu_share
// (POST /v1/nodes/{id}/throttle on the coordinator) changes the share at
// once: running steps take the new share from their next step. Run gives
// the cgroup its cpu.max back as it ends.
//
// A stage task may also carry its own share of the node
// (api.Task.TaskCPUShare: the coordinator's allocator gives a job u of
// the node's N units as the share u/N); a newer generation of the task
// that changes only Units and TaskCPUShare applies from the worker's next
// step, through the same duty cycle after the node's own (units.go). The
// worker keeps its threads, so the job's math does not change.
package node
