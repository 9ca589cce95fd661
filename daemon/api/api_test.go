package api

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func validRegister() RegisterRequest {
	return RegisterRequest{Name: "n-1", DataAddr: "127.0.0.1:7071", Type: "cpu-1t", Units: 2, Cores: 2,
		MemoryBytes: 1 << 30, GPUs: []GPU{{Name: "V100", MemoryBytes: 16 << 30, Multiprocessors: 80}}}
}

func TestRegisterValidate(t *testing.T) {
	ok := validRegister()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid registration: %v", err)
	}
	ok.Previous = "n-1~12"
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid registration naming its previous id: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*RegisterRequest)
		want   string
	}{
		{"empty name", func(r *RegisterRequest) { r.Name = "" }, "name"},
		{"name with slash", func(r *RegisterRequest) { r.Name = "a/b" }, "name"},
		{"long name", func(r *RegisterRequest) { r.Name = strings.Repeat("a", MaxNameLen+1) }, "name"},
		{"no port", func(r *RegisterRequest) { r.DataAddr = "127.0.0.1" }, "data_addr"},
		{"port 0", func(r *RegisterRequest) { r.DataAddr = "127.0.0.1:0" }, "data_addr"},
		{"port too big", func(r *RegisterRequest) { r.DataAddr = "127.0.0.1:70000" }, "data_addr"},
		{"no host", func(r *RegisterRequest) { r.DataAddr = ":7071" }, "data_addr"},
		{"zero units", func(r *RegisterRequest) { r.Units = 0 }, "units"},
		{"huge units", func(r *RegisterRequest) { r.Units = MaxUnits + 1 }, "units"},
		{"negative cores", func(r *RegisterRequest) { r.Cores = -1 }, "cores"},
		{"negative memory", func(r *RegisterRequest) { r.MemoryBytes = -1 }, "memory_bytes"},
		{"negative gpu memory", func(r *RegisterRequest) { r.GPUs[0].MemoryBytes = -1 }, "gpus[0]"},
		{"huge gpu uuid", func(r *RegisterRequest) { r.GPUs[0].UUID = strings.Repeat("f", MaxNameLen+1) }, "gpus[0]"},
		{"too many gpus", func(r *RegisterRequest) { r.GPUs = make([]GPU, MaxGPUs+1) }, "gpus"},
		{"previous id of another node", func(r *RegisterRequest) { r.Previous = "n-2~3" }, "previous"},
		{"previous id without a number", func(r *RegisterRequest) { r.Previous = "n-1~" }, "previous"},
		{"previous id with a sign", func(r *RegisterRequest) { r.Previous = "n-1~-3" }, "previous"},
		{"previous name alone", func(r *RegisterRequest) { r.Previous = "n-1" }, "previous"},
		{"previous id too long", func(r *RegisterRequest) { r.Previous = "n-1~" + strings.Repeat("9", 21) }, "previous"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := validRegister()
			tc.mutate(&r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestHeartbeatValidate(t *testing.T) {
	good := Heartbeat{Tasks: []TaskReport{{TaskID: "j1-s0-r0", State: TaskRunning, Step: 3, Loss: 0.5, SamplesPerS: 100}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid heartbeat: %v", err)
	}
	for _, tc := range []struct {
		name string
		r    TaskReport
		want string
	}{
		{"no id", TaskReport{State: TaskRunning}, "task_id"},
		{"bad state", TaskReport{TaskID: "a", State: "sleeping"}, "state"},
		{"negative step", TaskReport{TaskID: "a", State: TaskDone, Step: -1}, "step"},
		{"negative throughput", TaskReport{TaskID: "a", State: TaskDone, SamplesPerS: -1}, "samples_per_s"},
		{"long error", TaskReport{TaskID: "a", State: TaskFailed, Error: strings.Repeat("x", MaxErrorLen+1)}, "error"},
		{"checkpoint written at step 0", TaskReport{TaskID: "a", State: TaskRunning, CheckpointWriting: &CheckpointWriting{Step: 0}}, "checkpoint_writing"},
		{"negative bytes written", TaskReport{TaskID: "a", State: TaskRunning, CheckpointWriting: &CheckpointWriting{Step: 5, Bytes: -1}}, "checkpoint_writing"},
		{"segment before step 1", TaskReport{TaskID: "a", State: TaskRunning, Segment: &DataSegment{From: 0, Members: []int{0}, Batches: []int{1}}}, "segment: from 0"},
		{"segment without members", TaskReport{TaskID: "a", State: TaskRunning, Segment: &DataSegment{From: 1, At: 1}}, "segment: members"},
		{"segment read before its start", TaskReport{TaskID: "a", State: TaskRunning, Segment: &DataSegment{From: 5, At: 4, Members: []int{0}, Batches: []int{1}}}, "at 4"},
		{"segment position past the bound", TaskReport{TaskID: "a", State: TaskRunning, Segment: &DataSegment{From: 1, At: 1, Position: MaxRecord + 1, Members: []int{0}, Batches: []int{1}}}, "position"},
		{"segment members unsorted", TaskReport{TaskID: "a", State: TaskRunning, Segment: &DataSegment{From: 1, At: 1, Members: []int{2, 1}, Batches: []int{1, 1}}}, "ascending"},
		{"segment batch 0", TaskReport{TaskID: "a", State: TaskRunning, Segment: &DataSegment{From: 1, At: 1, Members: []int{0}, Batches: []int{0}}}, "batches[0]"},
		{"segment batches short", TaskReport{TaskID: "a", State: TaskRunning, Segment: &DataSegment{From: 1, At: 1, Members: []int{0, 1}, Batches: []int{4}}}, "2 members"},
		{"segment too many", TaskReport{TaskID: "a", State: TaskRunning, Segment: &DataSegment{From: 1, At: 1, Members: make([]int, MaxUnits+1), Batches: make([]int, MaxUnits+1)}}, "members: want"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Heartbeat{Tasks: []TaskReport{tc.r}}
			if err := h.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
	dup := Heartbeat{Tasks: []TaskReport{good.Tasks[0], good.Tasks[0]}}
	if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate report: got %v", err)
	}
	many := Heartbeat{Tasks: make([]TaskReport, MaxTasksPerNode+1)}
	if err := many.Validate(); err == nil {
		t.Fatal("too many reports accepted")
	}
}

func validTask() Task {
	return Task{TaskID: "j1-s0-r0", JobID: "j1", Role: RoleStage, Stage: 0, Replica: 1, Replicas: 2, Units: 1,
		FirstLayer: 0, LastLayer: 2, Model: "name = 'm'", Data: "synthetic:1", DataShard: 1, DataShards: 2,
		Batch: 64, Steps: 10, Mode: ModeBSP, PS: []string{"127.0.0.1:7001"}, Next: []string{"127.0.0.1:7002"}, Plain: true}
}

func TestTaskValidate(t *testing.T) {
	ok := validTask()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid task: %v", err)
	}
	ps := Task{TaskID: "j1-ps1", JobID: "j1", Role: RolePS, Shard: 1, Model: "m", Data: "synthetic", Steps: 1,
		Mode: ModeASP, PS: []string{"127.0.0.1:7001", "127.0.0.1:7003"}, SecretFile: "/etc/heterps/secret"}
	if err := ps.Validate(); err != nil {
		t.Fatalf("valid ps task: %v", err)
	}
	ring := validTask()
	ring.Layout = []StageLayout{{FirstLayer: 0, LastLayer: 2, Replicas: 2, DenseSync: DenseSyncAllreduce}}
	ring.Ring = []string{"127.0.0.1:7004", "127.0.0.1:7005"}
	if err := ring.Validate(); err != nil {
		t.Fatalf("valid allreduce task: %v", err)
	}
	tlsOnly := ps
	tlsOnly.SecretFile = "" // a cluster authenticated by mutual TLS alone
	if err := tlsOnly.Validate(); err != nil {
		t.Fatalf("task of a TLS-only cluster: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Task)
		want   string
	}{
		{"no job", func(t *Task) { t.JobID = "" }, "job_id"},
		{"bad role", func(t *Task) { t.Role = "boss" }, "role"},
		{"replica out of range", func(t *Task) { t.Replica = 2 }, "replica"},
		{"no units", func(t *Task) { t.Units = 0 }, "units"},
		{"reversed layers", func(t *Task) { t.FirstLayer = 3 }, "layers"},
		{"data shard out of range", func(t *Task) { t.DataShard = 2 }, "data shard"},
		{"zero batch", func(t *Task) { t.Batch = 0 }, "batch"},
		{"no model", func(t *Task) { t.Model = "" }, "model"},
		{"no steps", func(t *Task) { t.Steps = 0 }, "steps"},
		{"bad mode", func(t *Task) { t.Mode = "ssp" }, "mode"},
		{"no ps", func(t *Task) { t.PS = nil }, "ps"},
		{"bad next", func(t *Task) { t.Next = []string{"nowhere"} }, "next[0]"},
		{"secret and plain", func(t *Task) { t.SecretFile = "/s" }, "secret_file"},
		{"checkpoint without dir", func(t *Task) { t.CheckpointEvery = 5 }, "checkpoint_every"},
		{"unknown dense sync", func(t *Task) { t.Layout = []StageLayout{{Replicas: 2, DenseSync: "nccl"}} }, "dense_sync"},
		{"allreduce without its ring", func(t *Task) { t.Layout = []StageLayout{{Replicas: 2, DenseSync: DenseSyncAllreduce}} }, "ring"},
		{"allreduce in asp", func(t *Task) {
			t.Layout, t.Ring, t.Mode = []StageLayout{{Replicas: 2, DenseSync: DenseSyncAllreduce}}, []string{"127.0.0.1:1", "127.0.0.1:2"}, ModeASP
		}, "bsp"},
		{"bad ring address", func(t *Task) {
			t.Layout, t.Ring = []StageLayout{{Replicas: 2, DenseSync: DenseSyncAllreduce}}, []string{"127.0.0.1:1", "x"}
		}, "ring[1]"},
		{"ring without allreduce", func(t *Task) { t.Ring = []string{"127.0.0.1:1", "127.0.0.1:2"} }, "ring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := validTask()
			tc.mutate(&task)
			if err := task.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestTaskJSONNames pins the wire names the node daemon and the CLI rely on.
func TestTaskJSONNames(t *testing.T) {
	b, err := json.Marshal(validTask())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"task_id"`, `"job_id"`, `"role"`, `"first_layer"`, `"last_layer"`, `"data_shard"`,
		`"data_shards"`, `"batch"`, `"steps"`, `"seed"`, `"mode"`, `"ps"`, `"next"`, `"prev"`, `"plain"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("task JSON lacks %s: %s", key, b)
		}
	}
}

func TestJobStateFinal(t *testing.T) {
	for s, want := range map[JobState]bool{JobPending: false, JobPlanning: false, JobRunning: false,
		JobDone: true, JobFailed: true, JobCancelled: true} {
		if s.Final() != want {
			t.Errorf("%s.Final() = %v, want %v", s, !want, want)
		}
	}
}

func TestCPUShareValidate(t *testing.T) {
	for _, share := range []float64{MinCPUShare, 0.25, 1} {
		r := ThrottleRequest{CPUShare: share}
		if err := r.Validate(); err != nil {
			t.Errorf("share %g: %v", share, err)
		}
		hb := Heartbeat{CPUShare: share, CPUShareMode: CPUShareDutyCycle}
		if err := hb.Validate(); err != nil {
			t.Errorf("heartbeat with share %g: %v", share, err)
		}
	}
	for _, share := range []float64{0, -0.5, MinCPUShare / 2, 1.0001, math.NaN(), math.Inf(1)} {
		r := ThrottleRequest{CPUShare: share}
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "cpu_share") {
			t.Errorf("throttle to %g: got %v, want an error naming cpu_share", share, err)
		}
	}
	reg := validRegister()
	reg.CPUShare = 2
	if err := reg.Validate(); err == nil || !strings.Contains(err.Error(), "cpu_share") {
		t.Errorf("registration with share 2: got %v", err)
	}
	reg = validRegister()
	reg.CPUShareMode = "turbo"
	if err := reg.Validate(); err == nil || !strings.Contains(err.Error(), "cpu_share_mode") {
		t.Errorf("registration with mode turbo: got %v", err)
	}
	if hb := (Heartbeat{}); hb.Validate() != nil {
		t.Error("a heartbeat without a share is refused")
	}
}

// A resize names its kept replicas ascending with a batch each, and the
// replicas it adds by node, each named once with a batch in bounds.
func TestResizeRequestValidate(t *testing.T) {
	good := []ResizeRequest{
		{Replicas: []int{0, 2}, Batches: []int{300, 212}},
		{Replicas: []int{0}, Batches: []int{256}, Add: []NewReplica{{Node: "n2", Batch: 256}}},
		{Add: []NewReplica{{Node: "n2", Batch: 512}}},
	}
	for _, r := range good {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for _, tc := range []struct {
		r    ResizeRequest
		want string
	}{
		{ResizeRequest{}, "at least one"},
		{ResizeRequest{Stage: -1, Replicas: []int{0}, Batches: []int{1}}, "stage"},
		{ResizeRequest{Replicas: []int{1, 0}, Batches: []int{1, 1}}, "ascending"},
		{ResizeRequest{Replicas: []int{0}, Batches: []int{MaxBatch + 1}}, "batches[0]"},
		{ResizeRequest{Replicas: []int{0}, Batches: []int{1, 2}}, "2 for 1"},
		{ResizeRequest{Add: []NewReplica{{Node: "", Batch: 1}}}, "add[0].node"},
		{ResizeRequest{Add: []NewReplica{{Node: strings.Repeat("n", MaxNameLen+1), Batch: 1}}}, "add[0].node"},
		{ResizeRequest{Add: []NewReplica{{Node: "a", Batch: 1}, {Node: "a", Batch: 1}}}, "named twice"},
		{ResizeRequest{Add: []NewReplica{{Node: "a", Batch: 0}}}, "add[0].batch"},
		{ResizeRequest{Add: make([]NewReplica, MaxUnits+1)}, "at most"},
	} {
		if err := tc.r.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.r, err, tc.want)
		}
	}
}

// TestJobStatusTrainedOn: a node has trained once its stage-0 replica
// reports a step's compute time; a replica yet to report, a node without
// one and a job without stages have not.
func TestJobStatusTrainedOn(t *testing.T) {
	stage := func(seconds ...float64) JobStatus {
		return JobStatus{Stages: []StageStatus{{Nodes: []string{"n0", "n3"}[:len(seconds)], StepSeconds: seconds}}}
	}
	for _, tc := range []struct {
		s    JobStatus
		want bool
	}{
		{stage(0.1, 0.2), true},
		{stage(0.1, 0), false},
		{stage(0.1), false},
		{JobStatus{}, false},
	} {
		if got := tc.s.TrainedOn("n3"); got != tc.want {
			t.Errorf("%+v: TrainedOn(n3) = %v, want %v", tc.s.Stages, got, tc.want)
		}
	}
}
