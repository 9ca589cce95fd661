// Package api holds the JSON types of heterps' HTTP control plane, shared by
// the coordinator (daemon/coord), the node daemons and the CLI. It has no
// logic beyond validating what arrives from the network.
//
// # Endpoints
//
// The control plane is HTTP/JSON served by the coordinator. Nodes pull their
// work; the coordinator never calls a node.
//
//	POST   /v1/nodes/register        RegisterRequest  -> RegisterResponse
//	POST   /v1/nodes/{id}/heartbeat  Heartbeat        -> HeartbeatResponse
//	GET    /v1/nodes                                  -> []NodeStatus
//	POST   /v1/nodes/{id}/throttle   ThrottleRequest  -> NodeStatus
//	POST   /v1/nodes/{id}/drain      DrainRequest     -> NodeStatus
//	POST   /v1/jobs                  job file (TOML)  -> SubmitResponse
//	GET    /v1/jobs                                   -> []JobStatus
//	GET    /v1/jobs/{id}                              -> JobStatus
//	DELETE /v1/jobs/{id}                              -> JobStatus (cancelled)
//	GET    /v1/alloc                                  -> AllocStatus (the allocator's last decision)
//	PUT    /v1/profiles/{model}      profile (TOML)   -> ProfilePutResponse
//	GET    /v1/profiles                               -> []Profile
//	DELETE /v1/profiles/{model}[/{type}]              -> []Profile (the ones forgotten)
//
// A job is submitted as the job file's TOML text with Content-Type
// application/toml (see config.ParseJob); errors in it come back with the
// file's line and column. Every other request body is JSON, decoded strictly:
// unknown fields, trailing data and bodies over MaxBodyBytes are rejected.
// Errors are reported as an Error object with a 4xx or 5xx status.
//
// A measured profile is stored as the problem file `heterps profile` writes
// (Content-Type application/toml, at most MaxProfileBytes), decoded and
// validated as a problem file: the coordinator keeps one record per type it
// holds, except the types its header marks as estimated
// (config.ProfileEstimatedPrefix), and plans jobs of that model on them.
//
// The CLI marks every try of one submission with the same Idempotency-Key
// header (IdempotencyKeyHeader, CheckIdempotencyKey). With a cluster
// secret, every request is signed and served at most once (auth.go,
// NonceCache).
//
// # Nodes
//
// A node registers with its name, the host:port of its data-plane (wire)
// listener (and, if it serves parameter-server shards on a listener of
// their own, that one's as ps_addr), the catalog type it offers and how
// many units of it, and its inventory. A machine offering several types (a GPU server's GPUs and its
// CPU cores, as a catalog's [[node]] may list) registers once per type,
// under distinct names such as "<machine>.<type>", with the same data
// address. It then heartbeats every HeartbeatIntervalMS, reporting the state
// of each task it runs; the reply lists every task the node should be
// running. A task that disappears from the reply is to be stopped: its job
// finished, failed or was cancelled. A node that misses heartbeats for the
// coordinator's timeout (three intervals by default) is declared dead and
// every running job with a task on it fails with the reason; a dead node's
// heartbeats are answered 410 Gone and it must register again. Registering a
// name that is already registered replaces the old entry (a restarted
// daemon), which counts as that node dying.
//
// A node reports the share of its CPU it gives its work (cpu_share, from
// its node file; 1 by default) and how it enforces it (cpu_share_mode) as
// it registers and in each heartbeat. POST /v1/nodes/{id}/throttle (the
// node's id, or the name of a live node) records a new share; the
// coordinator hands it to the node in each heartbeat reply until the node
// reports applying it. The share asked for stays with the node's name: a
// daemon that registers again under it gets it too (until the coordinator
// restarts: nodes are not persisted).
//
// # Tasks and placement
//
// A job's plan has stages; stage i needs Units units of one type. Each stage
// is placed on live nodes of that type that host nothing else, largest offer
// first: a node's units all go to one replica, so a stage has as many
// replicas as nodes assigned, and a replica uses min(node units, units still
// needed). The job's batch is split over a stage's replicas in proportion to
// their units (the remainder to the first replicas). Replica r of a stage
// reads data shard r of Replicas. Parameter-server shards (the plan's
// ps_cores, at least one) go to the CPU-type nodes that host the job's
// stage replicas, whose workers then call them in-process, or, if none
// does, to any live CPU-type node; among those, the least loaded first;
// they do not take a node's offered units. Every task
// carries the job's layout: each stage's layers and replica count. Tasks on
// one node share its data address (several PS shards may, too) and are told
// apart by task id and shard index.
package api
