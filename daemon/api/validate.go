package api

import (
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// Bounds on what a request may hold.
const (
	MaxNameLen      = 128
	MaxUnits        = 1 << 16
	MaxGPUs         = 256
	MaxTasksPerNode = 1024
	MaxErrorLen     = 4096
)

var name = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._\-]*$`)

func checkName(field, v string) error {
	if len(v) > MaxNameLen || !name.MatchString(v) {
		return fmt.Errorf("%s: %.40q is not a name (up to %d letters, digits, '.', '_' and '-')", field, v, MaxNameLen)
	}
	return nil
}

// CheckAddr checks that v is host:port with a non-empty host and a port in
// 1..65535.
func CheckAddr(field, v string) error {
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		var p uint64
		p, err = strconv.ParseUint(port, 10, 16)
		if err == nil && p == 0 {
			err = errors.New("port 0")
		}
	}
	if err != nil || host == "" || len(v) > 2*MaxNameLen {
		return fmt.Errorf("%s: want host:port, got %.80q", field, v)
	}
	return nil
}

// Validate checks a registration.
func (r *RegisterRequest) Validate() error {
	errs := []error{checkName("name", r.Name), CheckAddr("data_addr", r.DataAddr), checkName("type", r.Type)}
	if r.PSAddr != "" {
		errs = append(errs, CheckAddr("ps_addr", r.PSAddr))
	}
	if r.Units < 1 || r.Units > MaxUnits {
		errs = append(errs, fmt.Errorf("units: must be in 1..%d, got %d", MaxUnits, r.Units))
	}
	if r.Cores < 0 || r.Cores > MaxUnits {
		errs = append(errs, fmt.Errorf("cores: must be in 0..%d, got %d", MaxUnits, r.Cores))
	}
	if r.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("memory_bytes: must be >= 0, got %d", r.MemoryBytes))
	}
	if len(r.GPUs) > MaxGPUs {
		errs = append(errs, fmt.Errorf("gpus: at most %d, got %d", MaxGPUs, len(r.GPUs)))
	}
	for i, g := range r.GPUs {
		if len(g.Name) > MaxNameLen || len(g.UUID) > MaxNameLen || g.MemoryBytes < 0 || g.Multiprocessors < 0 {
			errs = append(errs, fmt.Errorf("gpus[%d]: want a name and a uuid of at most %d bytes and sizes >= 0", i, MaxNameLen))
		}
	}
	if len(r.GPUDevices) > MaxGPUs {
		errs = append(errs, fmt.Errorf("gpu_devices: at most %d, got %d", MaxGPUs, len(r.GPUDevices)))
	}
	for i, d := range r.GPUDevices {
		if d < 0 {
			errs = append(errs, fmt.Errorf("gpu_devices[%d]: a device ordinal is >= 0, got %d", i, d))
		}
	}
	if r.LeaseMS < 0 || r.LeaseMS > maxLeaseMS {
		errs = append(errs, fmt.Errorf("lease_ms: must be in 0..%d, got %d", maxLeaseMS, r.LeaseMS))
	}
	if r.Previous != "" && !isRegistrationOf(r.Previous, r.Name) {
		errs = append(errs, fmt.Errorf("previous: want an id %s~N that this node registered under, got %q", r.Name, r.Previous))
	}
	errs = append(errs, validateReports(r.Tasks), checkReportedShare(r.CPUShare, r.CPUShareMode))
	return errors.Join(errs...)
}

// isRegistrationOf reports whether id is a registration id of the node
// named name: name, '~' and a registration number.
func isRegistrationOf(id, name string) bool {
	seq, ok := strings.CutPrefix(id, name+"~")
	if !ok || seq == "" || len(seq) > 20 {
		return false
	}
	for _, c := range seq {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Validate checks a heartbeat's task reports and CPU share.
func (h *Heartbeat) Validate() error {
	return errors.Join(validateReports(h.Tasks), checkReportedShare(h.CPUShare, h.CPUShareMode))
}

// CheckCPUShare checks that share is in MinCPUShare..1.
func CheckCPUShare(field string, share float64) error {
	if !(share >= MinCPUShare && share <= 1) { // also refuses NaN
		return fmt.Errorf("%s: must be in %g..1 (a fraction of the node's CPU), got %g", field, MinCPUShare, share)
	}
	return nil
}

// checkReportedShare checks a node's report of its share: absent (0), or
// a share with a known mode.
func checkReportedShare(share float64, mode string) error {
	if share != 0 {
		if err := CheckCPUShare("cpu_share", share); err != nil {
			return err
		}
	}
	switch mode {
	case "", CPUShareNone, CPUShareCgroup, CPUShareDutyCycle:
		return nil
	}
	return fmt.Errorf("cpu_share_mode: %.20q is not %s, %s or %s", mode, CPUShareNone, CPUShareCgroup, CPUShareDutyCycle)
}

// Validate checks a throttle: a share in MinCPUShare..1.
func (r *ThrottleRequest) Validate() error { return CheckCPUShare("cpu_share", r.CPUShare) }

// maxLeaseMS bounds a node's lease: a day.
const maxLeaseMS = 24 * 3600 * 1000

func validateReports(reports []TaskReport) error {
	if len(reports) > MaxTasksPerNode {
		return fmt.Errorf("tasks: at most %d, got %d", MaxTasksPerNode, len(reports))
	}
	seen := make(map[string]bool, len(reports))
	for i, t := range reports {
		if err := t.validate(); err != nil {
			return fmt.Errorf("tasks[%d]: %w", i, err)
		}
		if seen[t.TaskID] {
			return fmt.Errorf("tasks[%d]: task %q reported twice", i, t.TaskID)
		}
		seen[t.TaskID] = true
	}
	return nil
}

func (t *TaskReport) validate() error {
	switch {
	case t.TaskID == "" || len(t.TaskID) > MaxNameLen:
		return fmt.Errorf("task_id: want 1..%d bytes", MaxNameLen)
	case t.State != TaskRunning && t.State != TaskDone && t.State != TaskFailed:
		return fmt.Errorf("state: %.20q is not running, done or failed", t.State)
	case t.Step < 0:
		return fmt.Errorf("step: must be >= 0, got %d", t.Step)
	case t.Late < 0:
		return fmt.Errorf("late: must be >= 0, got %d", t.Late)
	case !finite(t.Loss):
		return fmt.Errorf("loss: must be finite")
	case !finite(t.SamplesPerS) || t.SamplesPerS < 0:
		return fmt.Errorf("samples_per_s: must be finite and >= 0, got %g", t.SamplesPerS)
	case t.Batch < 0 || t.Batch > MaxBatch:
		return fmt.Errorf("batch: must be in 0..%d, got %d", MaxBatch, t.Batch)
	case !finite(t.StepSeconds) || t.StepSeconds < 0:
		return fmt.Errorf("step_seconds: must be finite and >= 0, got %g", t.StepSeconds)
	case len(t.Error) > MaxErrorLen:
		return fmt.Errorf("error: at most %d bytes, got %d", MaxErrorLen, len(t.Error))
	case t.CheckpointFailure != nil && (t.CheckpointFailure.Step < 0 || len(t.CheckpointFailure.Error) > MaxErrorLen || len(t.CheckpointFailure.Node) > MaxNameLen):
		return fmt.Errorf("checkpoint_failure: want a step >= 0 and at most %d bytes of error", MaxErrorLen)
	case t.CheckpointFailures < 0:
		return fmt.Errorf("checkpoint_failures: must be >= 0, got %d", t.CheckpointFailures)
	case t.CheckpointWriting != nil && (t.CheckpointWriting.Step < 1 || t.CheckpointWriting.Bytes < 0):
		return fmt.Errorf("checkpoint_writing: want a step >= 1 and bytes >= 0, got step %d, %d bytes", t.CheckpointWriting.Step, t.CheckpointWriting.Bytes)
	case t.Segment != nil:
		if err := t.Segment.validate(); err != nil {
			return fmt.Errorf("segment: %w", err)
		}
	}
	return nil
}

func (s *DataSegment) validate() error {
	switch {
	case s.From < 1 || s.Start < 0 || s.Start > MaxRecord:
		return fmt.Errorf("from %d, start %d: want from >= 1, start in 0..%d", s.From, s.Start, int64(MaxRecord))
	case s.At < s.From || s.Position < s.Start || s.Position > MaxRecord:
		return fmt.Errorf("at %d, position %d: want at >= from %d, position in start %d..%d", s.At, s.Position, s.From, s.Start, int64(MaxRecord))
	case len(s.Members) == 0 || len(s.Members) > MaxUnits:
		return fmt.Errorf("members: want 1..%d, got %d", MaxUnits, len(s.Members))
	case len(s.Batches) != len(s.Members):
		return fmt.Errorf("batches: %d for %d members", len(s.Batches), len(s.Members))
	}
	return checkReplicaBatches("members", s.Members, s.Batches)
}

// checkReplicaBatches checks replica ids (distinct, >= 0, ascending) and
// their batches (1..MaxBatch each), as many.
func checkReplicaBatches(field string, ids, batches []int) error {
	for i, id := range ids {
		if id < 0 || (i > 0 && id <= ids[i-1]) {
			return fmt.Errorf("%s: want distinct ids >= 0 in ascending order, got %v", field, ids)
		}
		if b := batches[i]; b < 1 || b > MaxBatch {
			return fmt.Errorf("batches[%d]: must be in 1..%d, got %d", i, MaxBatch, b)
		}
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Validate checks an assignment, as a node should before acting on it.
func (t *Task) Validate() error {
	if t.TaskID == "" || t.JobID == "" {
		return errors.New("task: task_id and job_id are required")
	}
	errs := []error{t.validateRole(), t.validateRun(), t.validatePeers(), t.validateDenseSync()}
	if t.Plain && t.SecretFile != "" {
		errs = append(errs, errors.New("plain and secret_file exclude each other"))
	}
	if t.TaskCPUShare != 0 {
		if err := CheckCPUShare("task_cpu_share", t.TaskCPUShare); err != nil {
			errs = append(errs, err)
		}
	}
	if t.CheckpointEvery < 0 || (t.CheckpointEvery > 0 && t.CheckpointDir == "") {
		errs = append(errs, fmt.Errorf("checkpoint_every: %d needs a checkpoint_dir and must be >= 0", t.CheckpointEvery))
	}
	errs = append(errs, t.validateAsked())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("task %s: %w", t.TaskID, err)
	}
	return nil
}

// validateAsked checks the fields of checkpoints asked for while a job
// runs: they need a checkpoint_dir, and an asked step is one of the job's.
func (t *Task) validateAsked() error {
	switch {
	case t.CheckpointGrid < 0 || (t.CheckpointGrid > 0 && t.CheckpointDir == ""):
		return fmt.Errorf("checkpoint_grid: %d needs a checkpoint_dir and must be >= 0", t.CheckpointGrid)
	case t.CheckpointAt < 0 || t.CheckpointAt > t.Steps || (t.CheckpointAt > 0 && t.CheckpointDir == ""):
		return fmt.Errorf("checkpoint_at: %d needs a checkpoint_dir and must be within the job's %d steps", t.CheckpointAt, t.Steps)
	}
	return nil
}

func (t *Task) validateRole() error {
	switch t.Role {
	case RoleStage:
		switch {
		case t.Stage < 0 || t.Replicas < 1 || t.Replica < 0 || t.Replica >= t.Replicas:
			return fmt.Errorf("stage %d replica %d of %d: out of range", t.Stage, t.Replica, t.Replicas)
		case t.Units < 1:
			return fmt.Errorf("units: must be >= 1, got %d", t.Units)
		case t.FirstLayer < 0 || t.LastLayer < t.FirstLayer:
			return fmt.Errorf("layers %d..%d: not a range", t.FirstLayer, t.LastLayer)
		case t.DataShards < 1 || t.DataShard < 0 || t.DataShard >= t.DataShards:
			return fmt.Errorf("data shard %d of %d: out of range", t.DataShard, t.DataShards)
		case t.Batch < 1:
			return fmt.Errorf("batch: must be >= 1, got %d", t.Batch)
		}
	case RolePS:
		if t.Shard < 0 || t.Shard >= len(t.PS) {
			return fmt.Errorf("ps shard %d of %d: out of range", t.Shard, len(t.PS))
		}
	default:
		return fmt.Errorf("role: %.20q is not stage or ps", t.Role)
	}
	return nil
}

func (t *Task) validateRun() error {
	switch {
	case t.Model == "":
		return errors.New("model: empty")
	case t.Data == "":
		return errors.New("data: empty")
	case t.Steps < 1:
		return fmt.Errorf("steps: must be >= 1, got %d", t.Steps)
	case t.Mode != ModeBSP && t.Mode != ModeASP:
		return fmt.Errorf("mode: %.20q is not bsp or asp", t.Mode)
	}
	return nil
}

func (t *Task) validatePeers() error {
	if len(t.PS) == 0 {
		return errors.New("ps: a job has at least one parameter-server shard")
	}
	var errs []error
	for _, list := range []struct {
		field string
		addrs []string
	}{{"ps", t.PS}, {"next", t.Next}, {"prev", t.Prev}} {
		for i, a := range list.addrs {
			errs = append(errs, CheckAddr(fmt.Sprintf("%s[%d]", list.field, i), a))
		}
	}
	return errors.Join(errs...)
}

func (t *Task) validateDenseSync() error {
	allreduce := false
	for i, l := range t.Layout {
		switch l.DenseSync {
		case "", DenseSyncPS:
		case DenseSyncAllreduce:
			if t.Mode != ModeBSP {
				return fmt.Errorf("layout[%d].dense_sync: allreduce needs bsp", i)
			}
			allreduce = allreduce || (t.Role == RoleStage && i == t.Stage)
		default:
			return fmt.Errorf("layout[%d].dense_sync: %.20q is not ps or allreduce", i, l.DenseSync)
		}
	}
	switch {
	case !allreduce && len(t.Ring) > 0:
		return errors.New("ring: only for a replica of a stage with dense_sync allreduce")
	case allreduce && len(t.Ring) != t.Replicas:
		return fmt.Errorf("ring: %d addresses for %d replicas", len(t.Ring), t.Replicas)
	}
	errs := make([]error, len(t.Ring))
	for i, a := range t.Ring {
		errs[i] = CheckAddr(fmt.Sprintf("ring[%d]", i), a)
	}
	return errors.Join(errs...)
}

// MaxBatch bounds a replica's batch in a resize (the job file's bound).
const MaxBatch = 1 << 24

// Validate checks a resize: replicas ascending and distinct, one batch of
// 1..MaxBatch each; replicas added on distinct named nodes, with batches
// of the same bounds; at least one replica in all.
func (r *ResizeRequest) Validate() error {
	switch {
	case r.Stage < 0:
		return fmt.Errorf("stage: must be >= 0, got %d", r.Stage)
	case len(r.Replicas)+len(r.Add) == 0:
		return errors.New("replicas: at least one")
	case len(r.Replicas)+len(r.Add) > MaxUnits:
		return fmt.Errorf("replicas: at most %d, added ones included", MaxUnits)
	case len(r.Batches) != len(r.Replicas):
		return fmt.Errorf("batches: %d for %d replicas", len(r.Batches), len(r.Replicas))
	}
	if err := checkReplicaBatches("replicas", r.Replicas, r.Batches); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, a := range r.Add {
		switch {
		case a.Node == "" || len(a.Node) > MaxNameLen:
			return fmt.Errorf("add[%d].node: want a node name of 1..%d bytes", i, MaxNameLen)
		case seen[a.Node]:
			return fmt.Errorf("add[%d].node: node %q named twice", i, a.Node)
		case a.Batch < 1 || a.Batch > MaxBatch:
			return fmt.Errorf("add[%d].batch: must be in 1..%d, got %d", i, MaxBatch, a.Batch)
		}
		seen[a.Node] = true
	}
	return nil
}
