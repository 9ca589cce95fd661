// Package coord is heterps' coordinator: it keeps the registry of node
// daemons (alive while they heartbeat), accepts jobs over the HTTP control
// plane of package api, plans each job with daemon/sched on the catalog's
// types (the roofline estimates of their device descriptors, or the
// measured layer times of the job file's profile: profile.go), places the plan's stage replicas and parameter-server shards on
// registered nodes, hands the resulting tasks to the nodes in their
// heartbeat replies, and folds the nodes' progress reports into the job's
// status: step, loss, measured throughput per stage and the cost so far.
//
// A job is pending until the planner takes it, planning while the scheduler
// runs, running once placed, and then done (every stage task reported done),
// failed (a task failed, a node hosting one died, the plan was infeasible or
// could not be hosted) or cancelled (DELETE /v1/jobs/{id}). A job whose
// file asks for checkpoint.restarts and that fails while running is
// restarting instead, until it is resubmitted as a new job restored from its
// latest checkpoint (restart.go); so is a job whose batch controller
// resizes by restarting (batching.resize = "restart", batchrestart.go), or
// that re-planning from measured throughput moves to a better plan
// (replan.go: [replan] in the job file; it may also resize in place), or
// that runs below its throughput_limit after losing nodes and moves back
// up once nodes return (raise.go).
// The batch controller balances a job's lanes (lanes.go, balance.go).
// Checkpoints whose shards span several nodes are completed here: the
// coordinator writes a step's manifest once every shard has reported its
// file (checkpoint.go). The placement rules are in package api's
// documentation.
//
// With an allocation policy (Config.AllocPolicy, heterpsd --alloc-policy)
// the coordinator divides the units of nodes among running jobs every
// epoch, SLAQ's way (package alloc): a unit is one unit (a core) of a
// node, new jobs start on one unit, nodes are shared, and a job's units
// change in place as its stage task's CPU share (alloc.go). Jobs may stop
// at a target_loss_reduction, and record their loss history to a trace.
//
// Concurrency: one mutex guards the registry and the jobs; the planner, the
// liveness reaper, the restarter and the allocator are goroutines owned by
// Run, which waits for them.
package coord
