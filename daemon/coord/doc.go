// Package coord is heterps' coordinator: it keeps the registry of node
// daemons (alive while they heartbeat), accepts jobs over the HTTP control
// plane of package api, plans each job with daemon/sched on the catalog's
// types, places the plan's stage replicas and parameter-server shards on
// registered nodes, hands the resulting tasks to the nodes in their
// heartbeat replies, and folds the nodes' progress reports into the job's
// status: step, loss, measured throughput per stage and the cost so far.
//
// A job is pending until the planner takes it, planning while the scheduler
// runs, running once placed, and then done (every stage task reported done),
// failed (a task failed, a node hosting one died, the plan was infeasible or
// could not be hosted) or cancelled (DELETE /v1/jobs/{id}). The placement
// rules are in package api's documentation.
//
// Concurrency: one mutex guards the registry and the jobs; the planner and
// the liveness reaper are goroutines owned by Run, which waits for them.
package coord
