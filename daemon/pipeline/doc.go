// Package pipeline is heterps' stage runtime: a Worker runs one replica of
// one pipeline stage — a range of a model's layers — step by step, passing
// activations forward and gradients backward over daemon/wire, and keeping
// its parameters on the parameter servers (daemon/ps).
//
// # A step
//
// Stage 0 reads its batch (the next one is read in the background while
// the step runs) and splits it into Config.MicroBatches micro-batches;
// later stages receive each micro-batch's activations, with the rows of the
// batch they belong to, from their upstream partners. A worker pulls its
// dense parameters as of the previous step, then for each micro-batch pulls
// the rows its embedding layers need and runs forward, sending the output
// downstream in the background, so that stage i+1 works on micro-batch m
// while stage i computes m+1. The last stage runs the loss and backward of
// each micro-batch as soon as its forward is done; the others take the
// gradients back in order and run backward, sending each input gradient
// upstream in the background, as Config.Schedule orders: under 1F1B (the
// default) stage i of S runs min(S-i-1, M) warm-up forwards, then one
// forward and one backward in turn, then the remaining backwards; under
// fill-drain (GPipe) all forwards, then all backwards (schedule.go). A
// micro-batch in flight holds a copy of the stage's layers (layers keep
// their forward state for backward), sharing the dense values; a worker
// keeps as many copies as its schedule has micro-batches live — min(S-i, M)
// under 1F1B, M under fill-drain, 1 on the last stage — and reports the
// step's peak in Result.PeakLive. Each micro-batch's parameter gradients
// are kept apart from its copy until the step's last backward, when the
// worker pushes them, weighted by rows n_m/n, while the last sends finish:
// both schedules train bit for bit alike. Every exchange is bounded by the step timeout; a
// dropped connection or a silent peer ends the step with an error, never a
// hang.
//
// # Which replicas exchange
//
// Replica j of stage i (R_i replicas) exchanges with every replica k of
// stage i+1 (R_{i+1} replicas) with k ≡ j (mod min(R_i, R_{i+1})), see
// Partners. With equal counts that is j with j. When stage i has more
// replicas, several send to one (j mod R_{i+1}), which stacks their rows in
// replica order and returns each its rows' gradient; when stage i+1 has
// more, replica j splits its rows into contiguous pieces, one per partner
// in replica order: near-equal, or, when its Share names the partners'
// batches (Share.Next), partner k gets Next[k] rows of the step (lanes,
// below). Every replica of every stage thus gets rows every step, which
// the parameter servers' BSP barrier needs. The pair talks on stream
// EdgeStream(i, j, k).
//
// # Lanes
//
// Heterogeneity-aware batching gives the replicas of a data-parallel stage
// unequal batches. In a pipeline it does so by lanes: when every stage has
// either R replicas or one (R >= 2), lane j is replica j of each stage of R
// replicas, and lane j's batch b_j is the batch of each of them. Stage 0
// replicas read b_j rows; an R -> R edge passes them on as they are; R -> 1
// stacks them; 1 -> R splits by Share.Next = (b_0, ..., b_{R-1}),
// micro-batch by micro-batch in proportion to what each partner has still
// to get, so that partner k gets exactly b_k rows of the step and a row of
// every micro-batch (a lane's batch must be at least the micro-batch
// count). Every R-replica stage's Share holds the lane batches, so the
// parameter servers' weights b_k/sum(b) (and ASP's b_k/mean(b)) agree
// across the stages. A lane runs at its slowest stage; the coordinator
// balances lanes on that. Other shapes (2 and 3 replicas, say) keep
// near-equal pieces and uniform batches.
//
// # Parameters
//
// PSParams declares a table on the parameter servers for each embedding
// layer and a block for each dense parameter (FC weights and biases),
// owned by the stage that runs the layer, with the model's optimisers.
// Before forward, a worker pulls (with after = step-1) its dense blocks
// and, for each embedding layer, only the rows of the ids its slots use in
// this batch, into a small local table indexed by the batch's distinct ids;
// the batch's ids are renumbered into it. After backward it pushes every
// block's gradient and each table's sparse gradient (ids mapped back),
// weighted by its row count b_k. In BSP a shard applies the step once every
// replica of the stage has pushed, averaging with w_k = b_k / sum(b), so
// data-parallel replicas stay in sync through the servers: each pulls the
// new values at the start of the next step. With one replica per stage the
// weight is 1 and the servers run the same optimiser kernels as nn's
// single-process Trainer, so training is bit-identical to it. In ASP
// (Config.Mode) pulls take what the servers hold and every push is applied
// on arrival, its gradient multiplied by b_k/mean(b) over the stage's share
// of the step (the worker scales it; the push's weight is 1), so that every
// sample counts alike when the replicas' batches differ. Equal batches give
// exactly 1: plain asynchronous SGD, bit for bit.
//
// # Dense parameters by allreduce
//
// With Config.Allreduce (a BSP job's dense_sync = "allreduce") a stage's
// replicas keep their dense parameters themselves (allreduce.go): they
// pull them once, at the first step, and as backward leaves a layer each
// of its dense gradients is reduced among the step's members by a ring
// allreduce over the wire transport (reduce-scatter, then allgather; fixed
// ring order and chunking, so every replica holds the same bytes whatever
// the timing), weighted b_k/sum(b) by the rows each message carries; every
// replica then applies the servers' optimiser kernel and schedule to its
// copy. With Allreduce.ShardOptimiser the replica that finishes a chunk of
// the reduced gradient applies the optimiser to that chunk alone and the
// allgather carries the updated values instead (the same bits, 1/n of the
// work; such a stage cannot change members; for a mirror, below, the other
// members send the optimiser state of their chunks to the first). Rings of 4, 8,
// 16 ... members reduce gradients of at most halvingMaxFloats by recursive
// halving and doubling instead (halving.go: log2 n rounds each way instead
// of n-1, the same bytes, each chunk still finished by one member). Two replicas swap
// instead of passing chunks: each sends the other its whole gradient and
// both sum the pair in member order, one message each way (the ring's
// bytes, half its rounds); they sum and update alike, the whole parameter
// each, when their messages name the same kernels, and otherwise sum
// portably and update their own chunks as the ring's owners do. One replica reduces nothing
// and stays bit-identical to single-process training. Sparse rows stay on the servers. When the job
// checkpoints, the ring's first member also assigns the blocks their
// values and optimiser state at each checkpoint step (and only then), under
// the stage's MirrorStage, a one-replica stage under which the servers keep
// the blocks, so that the checkpoints match the replicas bit for bit; a
// restored job's replicas load them back with the values. A step's ring is its
// Share's members: a Resize rebuilds it from the step it takes effect at,
// which every replica must agree on (ring messages carry the members, and
// a replica whose predecessor disagrees fails the step).
//
// # Elastic stages
//
// A stage's replicas are a membership that may change at a step boundary
// (Share: member ids and each member's batch). Worker.Resize applies a new
// Share from a step on (or from the first step whose input is not read
// yet); a replica that is not a member of a step refuses it
// (ErrNotMember) and reads nothing ahead for it. Stage 0 then reads
// through Config.Input, e.g. ShardedInput, which re-shards the data at each
// change from the record index the whole stage has reached. The parameter
// servers learn the same membership through ps.Shard.SetMembers. Only
// single-stage (pure data-parallel) jobs may change their members; stages
// of a pipeline may change their batches (and Next) only. Every stage
// takes the share of a step when the step starts (stage 0 when it reads
// the step's input, ahead), and a Resize moves to the first step not yet
// taken, so stages may switch a step apart: the servers weigh by the rows
// actually pushed, so such a step is still trained right, only unevenly
// split.
//
// # Wiring a job
//
// Build the model once with the job's seed on the CPU backend; PSParams and
// ShardConfigs give each parameter-server shard's ps.Config; ps.NewShard
// and ps.NewService serve them (Service.Serve on a wire.Listener). Each
// replica gets a ps.Client whose Dial reaches the shards' services, a
// wire.Transport with its partners added as peers (the node with the
// larger id adds its peer before the smaller one dials), its links from
// PartnerLinks, and a Worker; it then calls Step for steps 1, 2, ... . A
// client with a shard's ps.ClientConfig.Local calls it in process; a stage
// of one replica says so (Config.SoleReplica), and its stage 0 then pulls
// the rows of the next batch that the step does not update while the step
// runs, only the others after its pushes; a BSP replica among several
// asks for all of the next batch's rows at once, and the servers answer
// when the step's update is applied (ahead.go). A data-parallel worker
// with Config.OverlapSteps returns from a step once its compute is done,
// the last layers' pushes and reductions still under way; the next
// step's forward waits for each layer's before running it (tail.go).
//
// Limits of this version: models with towers run only as a single stage;
// global gradient-norm clipping is refused; activations are exchanged from
// host memory (GPU buffers are copied through it); a step that fails is
// not retried (its pushes are exactly-once, so a caller may rerun it);
// under fill-drain a step's gradients queued on one connection should stay
// under the wire's QueueBytes (64 MiB by default) while the stage still
// runs forwards, or a reader stalled for ReadTimeout closes it (1F1B takes
// them as it goes).
package pipeline
