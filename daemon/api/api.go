package api

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/ckpt"
)

// Transport limits and media types.
const (
	// MaxBodyBytes caps every request body the coordinator reads.
	MaxBodyBytes = 1 << 20
	// ContentTypeTOML is the media type of a submitted job file.
	ContentTypeTOML = "application/toml"
	// ContentTypeJSON is the media type of every other body.
	ContentTypeJSON = "application/json"
)

// GPU is one accelerator in a node's inventory.
type GPU struct {
	Name            string `json:"name"`
	MemoryBytes     int64  `json:"memory_bytes"`
	Multiprocessors int    `json:"multiprocessors"`
	// Driver is the CUDA version of the driver that lists the GPU ("13.0").
	Driver string `json:"driver,omitempty"`
	// UUID is the GPU's own identifier as nvidia-smi prints it
	// ("GPU-8c6a…"): the coordinator refuses a second live node that names
	// a GPU another one trains on.
	UUID string `json:"uuid,omitempty"`
}

// RegisterRequest is the body of POST /v1/nodes/register.
type RegisterRequest struct {
	Name     string `json:"name"`
	DataAddr string `json:"data_addr"` // host:port of the node's wire listener
	// PSAddr is the host:port of the node's parameter-server listener when
	// it is not DataAddr (a node daemon serves stage links and PS shards on
	// separate listeners); empty means DataAddr.
	PSAddr      string `json:"ps_addr,omitempty"`
	Type        string `json:"type"`  // catalog type name the node offers
	Units       int    `json:"units"` // units of Type the node offers
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes"`
	GPUs        []GPU  `json:"gpus"`
	// GPUDevices are the driver ordinals (indexes into GPUs) of the GPUs
	// the node's units are, one per unit: its node file's gpus. Empty for
	// a CPU type.
	GPUDevices []int `json:"gpu_devices,omitempty"`
	// LeaseMS is how long the node keeps its tasks running while it cannot
	// reach the coordinator; past it, it stops them (fencing). A job that
	// failed with the node is not restarted before the lease has run out.
	LeaseMS int64 `json:"lease_ms,omitempty"`
	// Tasks reports the tasks the node is running as it registers: after a
	// restart of the coordinator, or after losing touch with it, a node
	// registers again and the coordinator adopts the tasks it still
	// knows, so that their jobs go on.
	Tasks []TaskReport `json:"tasks,omitempty"`
	// CPUShare is the fraction of its CPU the node gives its work now (its
	// file's cpu_share, or the latest throttle); 0 means 1 (not reported).
	// CPUShareMode says how the cap is enforced (CPUShareCgroup, ...).
	CPUShare     float64 `json:"cpu_share,omitempty"`
	CPUShareMode string  `json:"cpu_share_mode,omitempty"`
	// Previous is the id this daemon last registered under ("name~N"),
	// sent only while it still holds every task it was handed under that
	// id (none was stopped by its lease running out): a task the
	// coordinator bound to that registration and the daemon does not
	// report then never reached it (the coordinator went down before the
	// heartbeat that would have handed it over), and is handed over now
	// instead of failing its job. Empty from a daemon that just started.
	Previous string `json:"previous,omitempty"`
}

// Lease is the node's lease as a duration, 0 when it named none.
func (r RegisterRequest) Lease() time.Duration { return time.Duration(r.LeaseMS) * time.Millisecond }

// How a node enforces its CPU share.
const (
	// CPUShareNone: the share is 1, nothing is capped.
	CPUShareNone = "none"
	// CPUShareCgroup: the daemon writes its own cgroup v2 cpu.max.
	CPUShareCgroup = "cgroup"
	// CPUShareDutyCycle: each stage step sleeps (1/share - 1) x its
	// compute time after computing.
	CPUShareDutyCycle = "duty-cycle"
)

// MinCPUShare is the smallest CPU share a node takes: it bounds the
// duty-cycle sleep at 99 times the compute time.
const MinCPUShare = 0.01

// ThrottleRequest is the body of POST /v1/nodes/{id}/throttle: the node
// is to run at CPUShare (MinCPUShare..1) of its CPU from its next
// heartbeat on.
type ThrottleRequest struct {
	CPUShare float64 `json:"cpu_share"`
}

// DrainRequest is the body of POST /v1/nodes/{id}/drain: Drain true takes
// the node out of service (nothing new is placed on it; its jobs end or
// leave it), false puts it back.
type DrainRequest struct {
	Drain bool `json:"drain"`
}

// RegisterResponse answers a registration.
type RegisterResponse struct {
	NodeID              string `json:"node_id"`
	HeartbeatIntervalMS int64  `json:"heartbeat_interval_ms"`
}

// TaskState is what a node reports of a task.
type TaskState string

// Task states a node reports.
const (
	TaskRunning TaskState = "running"
	TaskDone    TaskState = "done"
	TaskFailed  TaskState = "failed"
)

// TaskReport is a node's report on one of its tasks.
type TaskReport struct {
	TaskID      string    `json:"task_id"`
	State       TaskState `json:"state"`
	Step        int64     `json:"step"` // steps completed
	Loss        float64   `json:"loss"` // training loss of the last step (stages with the loss layer)
	SamplesPerS float64   `json:"samples_per_s"`
	Error       string    `json:"error,omitempty"` // why, when State is failed
	// Batch is the batch a stage replica ran its last step with, and
	// StepSeconds the mean compute time of its last steps (not waiting
	// for partners or the parameter servers): what the batch controller
	// balances.
	Batch       int     `json:"batch,omitempty"`
	StepSeconds float64 `json:"step_seconds,omitempty"`
	// TimedSeconds is the window SamplesPerS is measured over (a stage
	// replica's steps after its first): with it the coordinator counts
	// replicas that end apart, as asynchronous ones do, over the stage's
	// whole time rather than each over its own.
	TimedSeconds float64 `json:"timed_seconds,omitempty"`
	// Permanent says the failure is deterministic (bad input data, a model
	// the data cannot feed, memory the task cannot have): restarting the
	// job would fail the same way.
	Permanent bool `json:"permanent,omitempty"`
	// Late is the generation of an exact change (Task.DataStart) the task
	// could not take at its step and went on without: the coordinator
	// calls that change off.
	Late int64 `json:"late,omitempty"`
	// Segment is a stage-0 replica's data segment (its reader's position
	// is computed from it): what the coordinator needs to give a replica
	// joining the stage its data start (Task.DataStart).
	Segment *DataSegment `json:"segment,omitempty"`
	// Checkpoints lists a PS task's shard files written for the job's
	// checkpoints, latest last (at most MaxReportedCheckpoints), when the
	// job's shards span several nodes: the coordinator writes each step's
	// manifest once every shard has reported its file.
	Checkpoints []ShardCheckpoint `json:"checkpoints,omitempty"`
	// CheckpointFailure is the latest checkpoint a PS task could not write
	// (a full disk, a lost mount), and CheckpointFailures how many it
	// could not: training goes on, and the next is tried at its step.
	CheckpointFailure  *CheckpointFailure `json:"checkpoint_failure,omitempty"`
	CheckpointFailures int64              `json:"checkpoint_failures,omitempty"`
	// Loading says a PS task is still loading the checkpoint its job
	// restores (hashing and reading it take as long as the files are
	// large); its stage replicas wait for it.
	Loading bool `json:"loading,omitempty"`
	// CheckpointWriting is the checkpoint copy a PS task is writing now,
	// if any, and how far it has got: the coordinator waits for a job's
	// last checkpoint while its writing gets further.
	CheckpointWriting *CheckpointWriting `json:"checkpoint_writing,omitempty"`
}

// CheckpointWriting is a checkpoint being written.
type CheckpointWriting struct {
	Step  int64 `json:"step"`
	Bytes int64 `json:"bytes"` // written so far
}

// CheckpointAsked is a checkpoint asked for while its job runs: the step
// the parameter servers take it at, when it was asked, and how many steps
// it has been asked at (a step that training passed before the servers
// heard of it is asked again, later).
type CheckpointAsked struct {
	Step  int64     `json:"step"`
	At    time.Time `json:"at"`
	Tries int       `json:"tries"`
}

// CheckpointFailure is a checkpoint that could not be written.
type CheckpointFailure struct {
	Step int64 `json:"step"`
	// Node is, in a job's status, the node that could not write its files
	// ("" for the coordinator's manifest).
	Node  string `json:"node,omitempty"`
	Error string `json:"error"`
}

// DataSegment is the stretch of stage 0's data a replica reads: from step
// From on, at record Start, replica Members[i] reads shard i of
// len(Members) of the training records with batch Batches[i]; the
// reporting replica's reader is at record Position after the steps before
// step At.
type DataSegment struct {
	From     int64 `json:"from"`
	Start    int64 `json:"start"`
	Members  []int `json:"members"`
	Batches  []int `json:"batches"`
	At       int64 `json:"at"`
	Position int64 `json:"position"`
}

// MaxRecord bounds a record index a report may carry.
const MaxRecord = 1 << 62

// MaxReportedCheckpoints caps TaskReport.Checkpoints.
const MaxReportedCheckpoints = 8

// ShardCheckpoint is one PS shard's file of the checkpoint at Step.
type ShardCheckpoint struct {
	Step int64          `json:"step"`
	File ckpt.FileEntry `json:"file"`
}

// Heartbeat is the body of POST /v1/nodes/{id}/heartbeat.
type Heartbeat struct {
	Tasks []TaskReport `json:"tasks"`
	// Leaving says the node is shutting down: the coordinator treats it as
	// dead at once (its stage replicas may leave their jobs, which go on
	// without them) instead of as failures of its tasks.
	Leaving bool `json:"leaving,omitempty"`
	// CPUShare and CPUShareMode: the share the node applies now and how
	// (as in RegisterRequest).
	CPUShare     float64 `json:"cpu_share,omitempty"`
	CPUShareMode string  `json:"cpu_share_mode,omitempty"`
}

// HeartbeatResponse lists every task the node should be running now.
type HeartbeatResponse struct {
	Tasks []Task `json:"tasks"`
	// CPUShare, when not 0, is the share the node is to apply from now on
	// (a throttle it has not reported applying yet).
	CPUShare float64 `json:"cpu_share,omitempty"`
}

// Task roles.
const (
	RoleStage = "stage" // runs layers FirstLayer..LastLayer of one replica of a stage
	RolePS    = "ps"    // holds one parameter-server shard
)

// Dense synchronisation of a stage (Task.DenseSync).
const (
	DenseSyncPS        = "ps"
	DenseSyncAllreduce = "allreduce"
)

// Synchronisation modes of a job.
const (
	ModeBSP = "bsp" // bulk synchronous: a step's update waits for every replica
	ModeASP = "asp" // asynchronous
)

// Task is one assignment of a job to a node. Everything a node needs is in
// it: the model file's text, the data spec, and the data-plane addresses of
// its peers.
type Task struct {
	TaskID string `json:"task_id"`
	JobID  string `json:"job_id"`
	Role   string `json:"role"` // RoleStage or RolePS

	// Stage replicas: stage index, replica index among Replicas, the units
	// (threads or GPUs) this replica uses and its layers (0-based, inclusive).
	Stage      int `json:"stage"`
	Replica    int `json:"replica"`
	Replicas   int `json:"replicas"`
	Units      int `json:"units"`
	FirstLayer int `json:"first_layer"`
	LastLayer  int `json:"last_layer"`

	// PS shards: this shard's index among len(PS).
	Shard int `json:"shard"`

	// Layout is every stage of the job in order: its layers and replica
	// count. PS shards declare the stages' parameters from it; stage
	// replicas find their partners (pipeline.Partners) with it.
	Layout []StageLayout `json:"layout"`

	Model     string `json:"model"`      // the model file's TOML text
	Data      string `json:"data"`       // data spec (daemon/data.ParseSpec)
	DataShard int    `json:"data_shard"` // this replica reads records i with i mod DataShards == DataShard
	// DataShards is the number of data shards of the stage.
	DataShards int `json:"data_shards"`
	Batch      int `json:"batch"` // this replica's batch size
	// MicroBatches splits each step's batch at stage 0; every stage of a
	// job gets the same (pipeline.Config.MicroBatches). 0 means 1.
	MicroBatches int    `json:"micro_batches,omitempty"`
	Steps        int64  `json:"steps"`
	Seed         uint64 `json:"seed"`
	Mode         string `json:"mode"` // ModeBSP or ModeASP
	// Ring, for a stage replica whose stage syncs its dense parameters by
	// allreduce (StageLayout.DenseSync), is the data_addr of every replica
	// of the stage, in replica order.
	Ring []string `json:"ring,omitempty"`
	// RingRelieve lists the replicas of the stage whose node also hosts a
	// parameter-server shard of the job (pipeline.Allreduce.Relieve): in a
	// ring of two with one of them listed, the other reduces alone.
	RingRelieve []int `json:"ring_relieve,omitempty"`

	// Schedule orders a pipeline stage's forwards and backwards
	// (pipeline.ParseSchedule: "1f1b", "fill-drain"); "" is 1f1b.
	Schedule string `json:"schedule,omitempty"`
	// Lookahead is the forwards a 1F1B stage runs beyond the strict
	// warm-up (pipeline.Config.Lookahead); every stage of a job gets the
	// same.
	Lookahead int `json:"lookahead,omitempty"`

	PS   []string `json:"ps"`   // ps_addr (else data_addr) of every PS shard, in shard order
	Next []string `json:"next"` // data_addr of the replicas of stage+1, in replica order
	Prev []string `json:"prev"` // data_addr of the replicas of stage-1, in replica order

	// SecretFile is the cluster secret's path on the node (wire.LoadSecret);
	// empty with Plain, which only loopback peers may use, and in a cluster
	// authenticated by mutual TLS only (neither set).
	SecretFile string `json:"secret_file,omitempty"`
	Plain      bool   `json:"plain,omitempty"`

	CheckpointDir   string `json:"checkpoint_dir,omitempty"`
	CheckpointEvery int64  `json:"checkpoint_every,omitempty"` // steps; 0 = never
	// CheckpointGrid, when > 0, adds its multiples to the steps at which an
	// allreduce stage's first replica assigns its dense parameters to the
	// parameter servers (pipeline.Allreduce.Mirror), so that a checkpoint
	// asked for while the job runs can be taken at the next of them.
	CheckpointGrid int64 `json:"checkpoint_grid,omitempty"`
	// CheckpointAt, on a PS task, is the step of the latest checkpoint the
	// user asked for (POST /v1/jobs/{id}/checkpoint), in addition to the
	// CheckpointEvery-th ones; 0 when none was. It rises as asks come.
	CheckpointAt int64 `json:"checkpoint_at,omitempty"`
	// RestoreDir, if set, is the step directory of a complete checkpoint
	// that PS shards start from (ps.RestoreAs); FirstStep is its step:
	// stage replicas run steps FirstStep+1 .. Steps, and stage 0 skips the
	// batches of the steps already trained.
	RestoreDir string `json:"restore_dir,omitempty"`
	FirstStep  int64  `json:"first_step,omitempty"`

	// Elastic stages. A task's spec may change while it runs: the same
	// TaskID with a higher Generation replaces it. From step FromStep on,
	// stage Stage's replicas are Members (replica ids, ascending) and
	// member i has batch Batches[i] and reads data shard i of
	// len(Members). A stage replica that is not among Members stops before
	// FromStep; a PS task makes its shards wait for exactly Members
	// (ps.Shard.SetMembers), which also completes a step a removed replica
	// never pushed. Batches, when given in a task's first spec, are every
	// replica's batch (the positions the data is re-sharded at are exact
	// only then). DataStart, when > 0, is the record index stage 0's data
	// starts at in the segment beginning at FromStep, for every member: a
	// replica joining a running stage starts there, and the change is
	// exact — each member takes it at FromStep or not at all (a replica
	// that has read that step's input, a PS shard that has applied the
	// step), going on as it was and reporting it (TaskReport.Late).
	// Without it a member takes a change
	// from the first step whose input it has not read, at the record it
	// computes the stage has reached.
	Generation int64 `json:"generation,omitempty"`
	FromStep   int64 `json:"from_step,omitempty"`
	Members    []int `json:"members,omitempty"`
	Batches    []int `json:"batches,omitempty"`
	DataStart  int64 `json:"data_start,omitempty"`
	// NextBatches, for a stage of one replica whose next stage has
	// several, is the batch of each of those (the job's lane batches): it
	// splits its rows among them so (pipeline.Share.Next). Empty means
	// near-equal pieces. It changes with Generation like Batches.
	NextBatches []int `json:"next_batches,omitempty"`

	// TaskCPUShare, when not 0, is the share of the node's CPU this task
	// may use (the coordinator's allocator sets Units / the node's units):
	// the stage worker's duty cycle enforces it, on top of the node's own
	// share. A change of Units and TaskCPUShare alone, at a higher
	// Generation, applies from the worker's next step.
	TaskCPUShare float64 `json:"task_cpu_share,omitempty"`
}

// StageLayout is one stage of a job as its tasks see it.
type StageLayout struct {
	FirstLayer int `json:"first_layer"`
	LastLayer  int `json:"last_layer"`
	Replicas   int `json:"replicas"`
	// DenseSync is how the stage keeps its dense parameters: DenseSyncPS
	// (or empty) on the parameter servers; DenseSyncAllreduce on its
	// replicas, reduced among them over the data plane, the servers
	// holding a mirror that the ring's first member updates when the job
	// checkpoints (pipeline.MirrorStage).
	DenseSync string `json:"dense_sync,omitempty"`
}

// JobState is a job's place in its lifecycle.
type JobState string

// Job states. Done, failed and cancelled are final.
const (
	JobPending JobState = "pending"
	// JobQueued: the job waits for free units on live nodes, in queue
	// order (JobStatus.QueuePosition).
	JobQueued    JobState = "queued"
	JobPlanning  JobState = "planning"
	JobRunning   JobState = "running"
	JobDone      JobState = "done"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
	// JobRestarting: the job failed while running and will be restarted
	// from its latest checkpoint as a new job (RestartedAs, once created).
	JobRestarting JobState = "restarting"
)

// Final reports whether s is a final state.
func (s JobState) Final() bool { return s == JobDone || s == JobFailed || s == JobCancelled }

// TrainedOn reports whether the job's first stage has a replica on node
// that has reported a step's compute time: it has trained there.
func (s JobStatus) TrainedOn(node string) bool {
	if len(s.Stages) == 0 {
		return false
	}
	st := s.Stages[0]
	i := slices.Index(st.Nodes, node)
	return i >= 0 && i < len(st.StepSeconds) && st.StepSeconds[i] > 0
}

// SubmitResponse answers POST /v1/jobs.
type SubmitResponse struct {
	JobID string `json:"job_id"`
}

// JobStatus is a job as GET /v1/jobs/{id} shows it.
type JobStatus struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	State  JobState `json:"state"`
	Reason string   `json:"reason,omitempty"` // why it failed, was cancelled or waits, or why a restart runs below its throughput_limit
	// QueuePosition is a waiting job's 1-based place in the queue.
	QueuePosition int `json:"queue_position,omitempty"`
	// Generation counts the job's placements: it grows when its tasks are
	// replaced.
	Generation int64 `json:"generation,omitempty"`
	// JoiningAt is the step replicas added by a grow join the stage at,
	// while they have not all reached it.
	JoiningAt int64 `json:"joining_at,omitempty"`
	// Batching is how its data-parallel stage splits the batch, and the
	// dynamic controller's last decision (daemon/batching.Decision).
	Batching *BatchingStatus `json:"batching,omitempty"`
	// Plan is the scheduler's plan, in the JSON of `heterps plan --json`.
	Plan        json.RawMessage `json:"plan,omitempty"`
	Step        int64           `json:"step"` // steps every stage replica has completed
	Steps       int64           `json:"steps"`
	Loss        float64         `json:"loss"`          // last reported loss of the last stage's replicas, their mean weighted by batch
	SamplesPerS float64         `json:"samples_per_s"` // the slowest stage's measured throughput
	CostSoFar   float64         `json:"cost_so_far"`   // catalog prices x units placed x hours running
	Stages      []StageStatus   `json:"stages"`
	PS          []string        `json:"ps"` // node name of each PS shard
	Submitted   time.Time       `json:"submitted"`
	Started     *time.Time      `json:"started,omitempty"`
	Finished    *time.Time      `json:"finished,omitempty"`
	// RestoredFrom is the checkpoint the job started from, if any.
	RestoredFrom *CheckpointStatus `json:"restored_from,omitempty"`
	// Checkpoint is the job's latest complete checkpoint, if any.
	Checkpoint *CheckpointStatus `json:"checkpoint,omitempty"`
	// CheckpointFailure is the latest checkpoint that could not be
	// written, while no later one is complete; CheckpointFailures counts
	// the checkpoint files (and manifests) not written since the
	// coordinator started.
	CheckpointFailure  *CheckpointFailure `json:"checkpoint_failure,omitempty"`
	CheckpointFailures int64              `json:"checkpoint_failures,omitempty"`
	// CheckpointWriting is the checkpoint the job's PS nodes are writing
	// now, if any: its step and the bytes of its files written so far, all
	// nodes together.
	CheckpointWriting *CheckpointWriting `json:"checkpoint_writing,omitempty"`
	// CheckpointAsked is the checkpoint the user asked for while the job
	// runs, until one of its step or later is complete (Checkpoint).
	CheckpointAsked *CheckpointAsked `json:"checkpoint_asked,omitempty"`
	// FinalCheckpointBy is set while a job that has trained every step
	// waits for the checkpoint of its last step: the time it ends without
	// it (a PS node that cannot write it, e.g. on a full disk, retries it
	// until then).
	FinalCheckpointBy *time.Time `json:"final_checkpoint_by,omitempty"`
	// Loading lists the nodes whose PS shards are still loading the
	// checkpoint the job restores (RestoredFrom).
	Loading []string `json:"loading,omitempty"`
	// Restarts counts the automatic restarts before this job (checkpoint
	// restarts in the job file); RestartOf is the job it restarts and
	// RestartedAs the job that restarted it after it failed.
	Restarts    int    `json:"restarts,omitempty"`
	RestartOf   string `json:"restart_of,omitempty"`
	RestartedAs string `json:"restarted_as,omitempty"`
	// Avoids is the nodes whose death or failure ended or shrank a job of
	// its restart chain: until Until neither its restarts nor its moves
	// back up to its throughput_limit use them (a node that dies and comes
	// back at once would move the job up and down again).
	Avoids []AvoidedNode `json:"avoids,omitempty"`
	// Alloc is the allocator's view of the job, while the coordinator runs
	// one (--alloc-policy) and the job has run.
	Alloc *JobAlloc `json:"alloc,omitempty"`
	// Replan is the re-planner's view of a job with [replan] enabled.
	Replan *ReplanStatus `json:"replan,omitempty"`
}

// AvoidedNode is a node a job does not use until Until.
type AvoidedNode struct {
	Node  string    `json:"node"`
	Until time.Time `json:"until"`
}

// ReplanStatus is what re-planning from measured throughput did for a
// job's restart chain: its current per-type scale factors on the
// profile's layer times (measured time / predicted time, 1 when not
// measured), each re-plan, and the chain's measured cost so far next to
// what the first plan predicted for the steps trained so far.
type ReplanStatus struct {
	Scales map[string]float64 `json:"scales"`
	// Samples counts the measurements folded into Scales.
	Samples int      `json:"samples"`
	Replans []Replan `json:"replans"`
	// MeasuredCost is prices x units placed x hours running, summed over
	// the chain's jobs; FirstPlanCost the first plan's predicted cost of
	// the steps trained so far (FirstPlanTotal of the whole run).
	MeasuredCost   float64 `json:"measured_cost"`
	FirstPlanCost  float64 `json:"first_plan_cost"`
	FirstPlanTotal float64 `json:"first_plan_total"`
	// MoveSeconds is the start-up time a move is charged: measured from
	// the chain's moves and restarts, or the job file's.
	MoveSeconds float64 `json:"move_seconds"`
}

// Replan is one decision to move a job: at Step, the predicted cost of
// the rest of the run on the old plan and on the new one (the move
// included: the steps since the checkpoint trained again and the
// start-up), the relative gain, the scale factors that predicted it, and
// how the job moved ("restart" from the checkpoint at FromStep as job
// NewJob, or "resize" in place).
type Replan struct {
	Time      time.Time          `json:"time"`
	Job       string             `json:"job"`
	Step      int64              `json:"step"`
	FromStep  int64              `json:"from_step"`
	OldCost   float64            `json:"old_cost"`
	NewCost   float64            `json:"new_cost"`
	Gain      float64            `json:"gain"`
	Scales    map[string]float64 `json:"scales"`
	OldAssign []string           `json:"old_assign"`
	NewAssign []string           `json:"new_assign"`
	OldUnits  []int              `json:"old_units"`
	NewUnits  []int              `json:"new_units"`
	Move      string             `json:"move"`
	NewJob    string             `json:"new_job,omitempty"`
}

// BatchingStatus is a job's batching mode and, in dynamic mode, the
// controller's last decision and how many adjustments it made.
type BatchingStatus struct {
	Mode        string          `json:"mode"`
	Adjustments int             `json:"adjustments"`
	Decision    json.RawMessage `json:"decision,omitempty"`
	// Reason says why the batches stay uniform when the job's stages
	// cannot be balanced (their replica counts do not form lanes).
	Reason string `json:"reason,omitempty"`
	// Lanes is the number of lanes balanced (a single stage's replicas, or
	// replica k of each stage of a pipeline); 0 when none.
	Lanes int `json:"lanes,omitempty"`
	// Restarts counts the kill-restart resizes of the job's restart chain
	// (batching.resize = "restart").
	Restarts int `json:"restarts,omitempty"`
}

// CheckpointStatus is a complete checkpoint: its step and directory.
type CheckpointStatus struct {
	Step int64  `json:"step"`
	Dir  string `json:"dir"`
	Job  string `json:"job,omitempty"` // the job that wrote it (its manifest's job_id)
}

// ResizeRequest is the body of PATCH /v1/jobs/{id}: from the next step,
// stage Stage runs replicas Replicas (ids among its current ones,
// ascending) with batch Batches[i] for replica Replicas[i], and, when Add
// is given, a new replica on each named node too, from a step a few
// heartbeats ahead (the change is then exact: Task.DataStart).
type ResizeRequest struct {
	Stage    int          `json:"stage"`
	Replicas []int        `json:"replicas"`
	Batches  []int        `json:"batches"`
	Add      []NewReplica `json:"add,omitempty"`
}

// NewReplica is a replica a resize adds: on the node named Node, all the
// units it offers a stage, with batch Batch.
type NewReplica struct {
	Node  string `json:"node"`
	Batch int    `json:"batch"`
}

// StageStatus is one stage of a running job.
type StageStatus struct {
	Stage      int      `json:"stage"`
	Type       string   `json:"type"`
	Units      int      `json:"units"`
	FirstLayer int      `json:"first_layer"`
	LastLayer  int      `json:"last_layer"`
	Nodes      []string `json:"nodes"` // node name of each replica
	// Replicas is each replica's id, in the order of Nodes: the ids a
	// resize (ResizeRequest.Replicas) names.
	Replicas []int `json:"replicas"`
	Batches  []int `json:"batches"` // batch of each replica, in the order of Nodes
	// StepSeconds is each replica's reported busy time per step.
	StepSeconds         []float64 `json:"step_seconds"`
	PredictedThroughput float64   `json:"predicted_throughput"`
	MeasuredThroughput  float64   `json:"measured_throughput"` // sum of the replicas' samples/s
	// DenseSync is how the stage syncs its dense parameters: DenseSyncPS
	// or DenseSyncAllreduce (StageLayout.DenseSync); empty before placement.
	DenseSync string `json:"dense_sync,omitempty"`
}

// NodeState is a node's liveness.
type NodeState string

// Node states.
const (
	NodeAlive NodeState = "alive"
	NodeDead  NodeState = "dead"
)

// NodeStatus is a node as GET /v1/nodes shows it.
type NodeStatus struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	DataAddr    string    `json:"data_addr"`
	PSAddr      string    `json:"ps_addr,omitempty"`
	Type        string    `json:"type"`
	Units       int       `json:"units"`
	Cores       int       `json:"cores"`
	MemoryBytes int64     `json:"memory_bytes"`
	GPUs        []GPU     `json:"gpus"`
	State       NodeState `json:"state"`
	Reason      string    `json:"reason,omitempty"` // why it is dead
	// Draining says the node is out of service (POST .../drain): it is
	// drained once Tasks is empty.
	Draining      bool      `json:"draining,omitempty"`
	Registered    time.Time `json:"registered"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	Tasks         []string  `json:"tasks"` // ids of the tasks assigned to it
	// CPUShare is the share of its CPU the node reports applying (1 when
	// it reports none) and CPUShareMode how; CPUShareRequested is the
	// latest throttle's share, which the node is handed until it reports
	// applying it (0: never throttled).
	CPUShare          float64 `json:"cpu_share"`
	CPUShareMode      string  `json:"cpu_share_mode,omitempty"`
	CPUShareRequested float64 `json:"cpu_share_requested,omitempty"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}
