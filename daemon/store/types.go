package store

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// State is everything Load reads.
type State struct {
	Counters Counters
	Jobs     []Job     // in submission order
	Profiles []Profile // in key order (ProfileKey)
	Drained  []string  // names of the nodes being drained
	// Throttles is the CPU share the latest throttle asked of each node,
	// by node name.
	Throttles map[string]float64
}

// Counters are the last ids handed out, so that ids stay unique across
// coordinator restarts.
type Counters struct {
	LastJob  uint64 `json:"last_job"`
	LastNode uint64 `json:"last_node"`
}

// Job is a job's durable record: what is needed to resume it after a
// restart of the coordinator, and its history once final.
type Job struct {
	ID  string `json:"id"`
	Seq uint64 `json:"seq"` // the job counter's value when it was created: submission order
	// Source is the job file's text as submitted; Restore, when set,
	// replaces its checkpoint.restore (a restart's checkpoint).
	Source  string `json:"source"`
	Restore string `json:"restore,omitempty"`
	Model   string `json:"model"` // the model file's text, resolved at submission

	State  api.JobState    `json:"state"`
	Reason string          `json:"reason,omitempty"`
	Plan   json.RawMessage `json:"plan,omitempty"`
	// Generation is the placement's generation, carried by every task:
	// it grows whenever the job's tasks are replaced.
	Generation int64   `json:"generation,omitempty"`
	Tasks      []Task  `json:"tasks,omitempty"`
	Hourly     float64 `json:"hourly,omitempty"`

	Restored *api.CheckpointStatus `json:"restored,omitempty"`
	Latest   *api.CheckpointStatus `json:"latest,omitempty"`

	Restarts    int       `json:"restarts,omitempty"`
	RestartOf   string    `json:"restart_of,omitempty"`
	RestartedAs string    `json:"restarted_as,omitempty"`
	Suspects    []Suspect `json:"suspects,omitempty"`
	// FailedAt is when a restarting job failed; NotBefore the earliest
	// time it may be restarted (backoff).
	FailedAt  time.Time `json:"failed_at,omitzero"`
	NotBefore time.Time `json:"not_before,omitzero"`
	// Move says the restart under way moves the job (to another plan or
	// batch split) rather than recovering from a failure: it spends none
	// of the job's restarts.
	Move bool `json:"move,omitempty"`

	// Batching is what its batching keeps across restarts of the
	// coordinator; nil: nothing to keep.
	Batching *Batching `json:"batching,omitempty"`

	// Replan is what re-planning has learned over its restart chain; nil:
	// the job does not re-plan, or has measured nothing yet.
	Replan *Replan `json:"replan,omitempty"`

	// Progress is the loss history and step times the coordinator
	// records of a running job it tracks (an allocation policy, a trace or
	// a target loss reduction), as of its last record; nil: none.
	Progress *Progress `json:"progress,omitempty"`

	// IdempotencyKey is the key its submission carried: a repeat of it
	// gets this job.
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Submitted      time.Time `json:"submitted"`
	Started        time.Time `json:"started,omitzero"`
	Finished       time.Time `json:"finished,omitzero"`
}

// Batching is a job's batching mode and counts and, while it restarts to resize
// its batches (batching.resize = "restart"), the batches it restarts with:
// ResizeLanes, lane by lane, and ResizeByNode, by the node of each lane's
// first replica.
type Batching struct {
	// Mode is the mode the job's batching resolved to ("auto" resolved
	// once, at placement).
	Mode         string         `json:"mode,omitempty"`
	Adjustments  int            `json:"adjustments,omitempty"`
	Restarts     int            `json:"restarts,omitempty"`
	ResizeLanes  []int          `json:"resize_lanes,omitempty"`
	ResizeByNode map[string]int `json:"resize_by_node,omitempty"`
}

// Replan is the durable part of a job's re-planning ([replan]): the
// measured/predicted time of each type, how many samples it averages, the
// decisions made, the measured cost of the chain's earlier jobs and the
// first plan's predicted cost of the whole run, the mean start-up of the
// chain's restarts over Moves of them, and whether the job is restarting
// to move.
type Replan struct {
	Scales      map[string]float64 `json:"scales,omitempty"`
	Samples     int                `json:"samples,omitempty"`
	Records     []api.Replan       `json:"records,omitempty"`
	Spent       float64            `json:"spent,omitempty"`
	FirstTotal  float64            `json:"first_total,omitempty"`
	MoveSeconds float64            `json:"move_seconds,omitempty"`
	Moves       int                `json:"moves,omitempty"`
	Moving      bool               `json:"moving,omitempty"`
}

// Progress is a job's loss at the steps recorded (its first loss first)
// and its measured seconds per step at a number of units.
type Progress struct {
	Losses []LossPoint  `json:"losses,omitempty"`
	Steps  []StepSample `json:"steps,omitempty"`
}

// LossPoint is the loss reported at a step.
type LossPoint struct {
	Step float64 `json:"step"`
	Loss float64 `json:"loss"`
}

// StepSample is the seconds a step took on units units.
type StepSample struct {
	Units   int     `json:"units"`
	Seconds float64 `json:"seconds"`
}

// Task is one placed task and the name of the node it is on; Last is its
// node's last report of it, kept once the job has ended (its step, loss
// and throughput, which a restarted coordinator shows).
type Task struct {
	Spec api.Task `json:"spec"`
	Node string   `json:"node"`
	// NodeID is the registration of the node the task was bound to (its
	// id, "name~N"), so that the daemon behind it, registering again with
	// it as its previous id, is known to be the same one.
	NodeID string          `json:"node_id,omitempty"`
	Last   *api.TaskReport `json:"last,omitempty"`
}

// Suspect is a node that failed a job, avoided by its restarts until
// Until.
type Suspect struct {
	Node  string    `json:"node"`
	Until time.Time `json:"until"`
}

func sortJobs(jobs []Job) {
	slices.SortStableFunc(jobs, func(a, b Job) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
}

// Profile is one measured profile column: the layer times of one model on
// one resource type, as `heterps profile` measured them at ProfileBatch.
type Profile struct {
	Model        string `json:"model"`
	Type         string `json:"type"`
	ProfileBatch int    `json:"profile_batch"`
	// Fingerprint is the model's layer shapes' fingerprint when the
	// coordinator knew the model as the profile was stored, else empty.
	Fingerprint string         `json:"fingerprint,omitempty"`
	StoredAt    time.Time      `json:"stored_at"`
	Layers      []ProfileLayer `json:"layers"`
	// DenseSync is the dense_sync whose synchronisation the times include
	// (config.ProblemType.DenseSync), if any.
	DenseSync string `json:"dense_sync,omitempty"`
}

// ProfileLayer is one layer's measured times on one unit at the
// profile's batch, and their parallel fractions.
type ProfileLayer struct {
	Name  string  `json:"name"`
	OCT   float64 `json:"oct"`
	ODT   float64 `json:"odt"`
	Alpha float64 `json:"alpha"`
	Beta  float64 `json:"beta"`
}

// ProfileKey is a profile's key: model and type names are identifiers
// (letters, digits, '.', '_', '-'), so the slash separates them.
func ProfileKey(model, typ string) string { return model + "/" + typ }
