// Package ps is heterps' parameter server: shards that hold a job's sparse
// embedding tables and dense parameter blocks, combine the gradients the
// replicas of a pipeline stage push, apply the optimiser, and write
// consistent checkpoints. It is transport-agnostic: a network service wraps
// a Shard's methods.
//
// # Placement
//
// Row id lives on shard ShardOf(id, shards): the splitmix64 finaliser of the
// id, modulo the shard count. Partition splits a batch of ids by shard.
// Dense blocks are placed by the caller (each block is declared on one
// shard). Tables and blocks are declared up front (Config): name, shape,
// the stage whose replicas push to them, optimiser and schedule, and for
// tables the initialisation seed and limit.
//
// # Rows
//
// A table row is created the first time it is pulled or pushed, with the
// values daemon/initrow computes from (seed, table, id): what single-process
// training starts from. Rows live in slabs (one allocation per slab and
// per optimiser state buffer, not per row; slab.go sizes them) found
// through an id -> slot map; Config.MaxRows caps the rows of all tables of a
// shard together, and a pull or push that would exceed it fails with
// ErrRowCap, creating nothing. Config.MemoryBytes is a byte budget over the
// blocks and the rows (RowBytes each, optimiser state included): a pull or
// push that would create rows past it fails with ErrMemoryBudget, creating
// nothing, and the shard goes on serving the others.
//
// # Versions, pulls and pushes
//
// Every table and block has a version: in BSP the last step applied (0
// before the first; a restored shard starts at the checkpoint's step), in
// ASP the number of pushes applied. PullRows and PullBlock take the version
// the caller needs ("after") and wait, bounded by the context and by
// Config.WaitTimeout, until the table or block has reached it; they return
// the values and the version they were read at. Close ends every wait with
// ErrShardClosed, and a wait's error names the replicas whose pushes the
// open BSP step still lacks. In BSP a replica that is
// about to compute step s pulls with after = s-1. PullRows answers per id,
// in the order given, repeats included.
//
// A push carries its identity PushID{Job, Stage, Replica, Step}, which names
// one push per table or block, and a weight. PushRows sends a sparse
// gradient (distinct ids and their rows), PushBlock a dense one. Pushes never
// wait for other replicas, and the caller may reuse its inputs once a push
// returns: a push that completes its BSP step is applied from them in
// place, one that waits (or an ASP push) is copied.
//
// BSP: a step's update of a table or block is applied once every member of
// its stage for that step has pushed it — by the push that completes the
// step, before it returns. The weight is the replica's batch size b_k; the
// gradients are averaged with w_k = b_k / sum(b) over the step's members,
// summed in ascending replica id (native WeightedSum), so the result does
// not depend on arrival order. Sparse pushes are merged by
// id: a row absent from a replica's push contributes zero. The optimiser
// then runs once, at step s (learning-rate schedule and Adam's bias
// correction both use s). Every replica must push every table and block of
// its stage every step, with no rows if it touched none, or the step never
// completes. Steps go one at a time: a push for a step already applied is
// ErrStale, for a step beyond the open one ErrAhead.
//
// # Membership
//
// A stage's members are replica ids that change at step boundaries: 0..n-1
// (Config.Replicas) until Shard.SetMembers(stage, from, ids) makes ids the
// members from step from on (over the wire: MsgSetMembers, Client.SetMembers;
// idempotent). A push from a replica that is not a member for its step is
// ErrNotMember. A change also reaches a step already open: pending pushes
// of replicas no longer members are discarded and the step is applied as
// soon as the remaining members have pushed, which is how the survivors of a
// dead replica's node get out of the barrier. Applied steps keep the set
// they were applied with. Membership is not checkpointed: a restored shard
// starts from Config.Replicas.
//
// ASP: each push is applied on arrival, its gradient multiplied by its
// weight (1 for plain asynchronous SGD; b_k / mean(b) makes every sample
// count alike), at step version+1.
//
// Exactly once: for each replica a shard remembers which of its last
// ReplayWindow steps it has accepted (the anti-replay window of IPsec). A
// push whose identity is pending in the open BSP step or already applied is
// acknowledged with Ack.Duplicate and changes nothing; an identity older
// than the window, or (BSP) any push for an applied step the shard has no
// record of, is ErrStale, so a retry is never applied twice.
//
// # Checkpoints
//
// Checkpoint writes one safetensors file per shard (FileName) into a step
// directory: for each table, "<name>.ids" (I64 [n]), "<name>" (F32 [n, dim])
// and "<name>.opt0", "<name>.opt1" (its optimiser state, as daemon/nn names
// it); for each block "<name>" and its state; metadata with the job, shard,
// mode and every table's and block's shape, optimiser and version. Tables
// stream from their slabs, never copied whole. In BSP the shard is fenced at
// the step first: later steps are held (their pushes are accepted, but not
// applied) until the file is written, so the file is exactly the state
// after the step. In ASP, where replicas run at steps of their own, the
// copy waits until every member of a table's or block's stage has had its
// pushes of each step up to the checkpoint's accepted (Reached), and holds
// the state as it is then: later pushes of faster replicas are in it too,
// so a job restarted from it trains those steps again. While the file
// itself is written every table and block is read-locked: pushes and row
// creation wait, and so do pulls queued behind them. CheckpointAll fences every shard, writes them, then writes the
// manifest last (ckpt.WriteManifest) into ckpt.StepDir(root, step). Restore
// reads the manifest first, refuses another job or shard count, checks its
// file's size and SHA-256 against it, and only then loads it; RestoreAs
// takes another job's checkpoint and re-shards it to the job's shard count.
//
// # Concurrency
//
// A Shard is safe for concurrent use. Each table and each block has its own
// lock (read-locked by pulls of existing rows); the shard starts no
// goroutines.
package ps
