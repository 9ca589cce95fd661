package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestExampleJobsParse(t *testing.T) {
	files, err := filepath.Glob("examples/jobs/*.toml")
	if err != nil || len(files) < 2 {
		t.Fatalf("want at least two example jobs, got %v (%v)", files, err)
	}
	for _, f := range files {
		j, err := LoadJob(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := LoadModel(j.Model); err != nil {
			t.Errorf("%s: model %q: %v", f, j.Model, err)
		}
		if j.TotalSteps() < 1 {
			t.Errorf("%s: %d steps", f, j.TotalSteps())
		}
	}
}

func TestJobDefaults(t *testing.T) {
	j, err := ParseJob("job.toml", []byte("model = \"models/ctrdnn.toml\"\ndata = \"synthetic\"\nbatch = 64\nsteps = 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if j.Version != 1 || j.Name != "ctrdnn" || j.Method != DefaultJobMethod || j.Mode != "bsp" || j.Optimizer != nil || j.Schedule != ScheduleOneFOneB {
		t.Errorf("defaults: got version %d name %q method %q mode %q optimizer %v schedule %q", j.Version, j.Name, j.Method, j.Mode, j.Optimizer, j.Schedule)
	}
	if j.PipelineLookahead() != DefaultLookahead {
		t.Errorf("1F1B's lookahead defaults to %d, want %d", j.PipelineLookahead(), DefaultLookahead)
	}
	j, err = ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 64\nsteps = 10\nlookahead = 0\n"))
	if err != nil || j.PipelineLookahead() != 0 {
		t.Errorf("lookahead = 0 (strict 1F1B): got %d (%v)", j.PipelineLookahead(), err)
	}
	j, err = ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 64\nsteps = 10\nschedule = \"fill-drain\"\n"))
	if err != nil || j.Schedule != ScheduleFillDrain || j.PipelineLookahead() != 0 {
		t.Errorf("schedule = \"fill-drain\": got %q, lookahead %d (%v)", j.Schedule, j.PipelineLookahead(), err)
	}
	if j.DenseSync != DenseSyncPS {
		t.Errorf("dense_sync defaults to %q, want ps", j.DenseSync)
	}
	j, err = ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 64\nsteps = 10\n[checkpoint]\ndir = \"/x\"\nevery = 5\nrestarts = 2\n"))
	if err != nil || j.DenseSync != DenseSyncAuto {
		t.Errorf("a job that restarts: dense_sync defaults to %q (%v), want auto", j.DenseSync, err)
	}
	j, err = ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 64\nsteps = 10\ndense_sync = \"auto\"\n"))
	if err != nil || !j.AllreduceAllowed() {
		t.Errorf("dense_sync = \"auto\": allreduce allowed %v (%v), want allowed", j != nil && j.AllreduceAllowed(), err)
	}
}

// A checkpointed job and a restored one may both sync by allreduce (the
// replicas of a restored job load the servers' optimiser state).
func TestJobDenseSyncAllreduce(t *testing.T) {
	for _, ckpt := range []string{"dir = \"/x\"\nevery = 5\n", "restore = \"/x/step-5\"\n"} {
		j, err := ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 64\nsteps = 10\ndense_sync = \"allreduce\"\n[checkpoint]\n"+ckpt))
		if err != nil {
			t.Fatal(err)
		}
		if j.DenseSync != DenseSyncAllreduce || !j.AllreduceAllowed() {
			t.Errorf("%q: dense_sync = %q, allreduce allowed %v; want allreduce", ckpt, j.DenseSync, j.AllreduceAllowed())
		}
	}
}

func TestJobTotalSteps(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int64
	}{
		{"steps = 7", 7},
		{"epochs = 2\nsamples = 1000", 16}, // 2000 / 128 = 15.6 -> 16
		{"epochs = 0.5\nsamples = 256", 1}, // 128 / 128
	} {
		j, err := ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 128\n"+tc.src+"\n"))
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		if got := j.TotalSteps(); got != tc.want {
			t.Errorf("%q: %d steps, want %d", tc.src, got, tc.want)
		}
	}
}

// TestBadJobsNameTheLine checks that every mistake is reported at the line
// of the offending field.
func TestBadJobsNameTheLine(t *testing.T) {
	const head = "version = 1\nmodel = \"ctrdnn\"\ndata = \"synthetic\"\n" // lines 1-3
	for _, tc := range []struct {
		name, body, field string
		line              int
	}{
		{"unknown key", "batch = 8\nsteps = 1\nbatchsize = 8\n", "batchsize", 6},
		{"wrong type", "batch = \"big\"\nsteps = 1\n", "batch", 4},
		{"zero batch", "steps = 1\nbatch = 0\n", "batch", 5},
		{"steps and epochs", "batch = 8\nsteps = 5\nepochs = 1\nsamples = 10\n", "epochs", 6},
		{"no length", "batch = 8\n", "steps", 0},
		{"epochs without samples", "batch = 8\nepochs = 1\n", "samples", 0},
		{"negative steps", "batch = 8\nsteps = -3\n", "steps", 5},
		{"bad mode", "batch = 8\nsteps = 1\nmode = \"ssp\"\n", "mode", 6},
		{"bad schedule", "batch = 8\nsteps = 1\nschedule = \"gpipe\"\n", "schedule", 6},
		{"negative lookahead", "batch = 8\nsteps = 1\nlookahead = -1\n", "lookahead", 6},
		{"lookahead past the micro-batches' cap", "batch = 8\nsteps = 1\nlookahead = 33\n", "lookahead", 6},
		{"lookahead with fill-drain", "batch = 8\nsteps = 1\nschedule = \"fill-drain\"\nlookahead = 1\n", "lookahead", 7},
		{"bad method", "batch = 8\nsteps = 1\nmethod = \"no way\"\n", "method", 6},
		{"negative limit", "batch = 8\nsteps = 1\nthroughput_limit = -1.0\n", "throughput_limit", 6},
		{"bad optimiser", "batch = 8\nsteps = 1\n[optimizer]\nkind = \"lbfgs\"\n", "optimizer.kind", 7},
		{"learning rate 0 (not the default)", "batch = 8\nsteps = 1\n[optimizer]\nlr = 0.0\n", "optimizer.lr", 7},
		{"checkpoint without dir", "batch = 8\nsteps = 1\n[checkpoint]\nevery = 10\n", "checkpoint.dir", 6},
		{"unknown checkpoint key", "batch = 8\nsteps = 1\n[checkpoint]\ndir = \"/x\"\nevry = 10\n", "checkpoint.evry", 8},
		{"too many micro-batches", "batch = 8\nsteps = 1\nmicro_batches = 33\n", "micro_batches", 6},
		{"micro-batches above the batch", "batch = 8\nsteps = 1\nmicro_batches = 9\n", "micro_batches", 6},
		{"restarts without checkpoints", "batch = 8\nsteps = 1\n[checkpoint]\nrestarts = 2\n", "checkpoint.restarts", 7},
		{"negative restarts", "batch = 8\nsteps = 1\n[checkpoint]\ndir = \"/x\"\nevery = 5\nrestarts = -1\n", "checkpoint.restarts", 9},
		{"negative keep", "batch = 8\nsteps = 1\n[checkpoint]\ndir = \"/x\"\nevery = 5\nkeep = -1\n", "checkpoint.keep", 9},
		{"unknown dense sync", "batch = 8\nsteps = 1\ndense_sync = \"nccl\"\n", "dense_sync", 6},
		{"allreduce in ASP", "batch = 8\nsteps = 1\nmode = \"asp\"\ndense_sync = \"allreduce\"\n", "dense_sync", 7},
		{"restore path with spaces around", "batch = 8\nsteps = 1\n[checkpoint]\nrestore = \" /x\"\n", "checkpoint.restore", 7},
		{"profile path with spaces around", "batch = 8\nsteps = 1\nprofile = \"p.toml \"\n", "profile", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJob("job.toml", []byte(head+tc.body))
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("got %v, want a *config.Error", err)
			}
			if cerr.Field != tc.field || cerr.Line != tc.line || cerr.File != "job.toml" {
				t.Errorf("got %s:%d field %q (%v), want line %d field %q", cerr.File, cerr.Line, cerr.Field, err, tc.line, tc.field)
			}
		})
	}
}

func TestJobMissingModelAndData(t *testing.T) {
	_, err := ParseJob("job.toml", []byte("batch = 8\nsteps = 1\n"))
	if err == nil || !strings.Contains(err.Error(), "model") || !strings.Contains(err.Error(), "data") {
		t.Fatalf("got %v, want errors naming model and data", err)
	}
}

func TestJobErrorfLocatesFields(t *testing.T) {
	j, err := ParseJob("job.toml", []byte("model = \"ctrdnn\"\n\ndata = \"nonsense\"\nbatch = 8\nsteps = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := j.Errorf("data", "unknown kind")
	if e.Line != 3 || e.File != "job.toml" || !strings.Contains(e.Error(), "job.toml:3:1: data: unknown kind") {
		t.Errorf("got %v (line %d)", e, e.Line)
	}
}

func TestJobModelFileCarriesTheOptimizerOverride(t *testing.T) {
	m, err := LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, job string
		want      Optimizer
	}{
		{"model's own", "", m.Optimizer},
		{"override", "[optimizer]\nkind = \"sgd\"\nlr = 0.5\n", Optimizer{Kind: "sgd", LR: 0.5, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Schedule: "constant"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n"+tc.job))
			if err != nil {
				t.Fatal(err)
			}
			src, err := j.ModelFile(m)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseModel("sent", src)
			if err != nil {
				t.Fatal(err)
			}
			if back.Optimizer != tc.want {
				t.Errorf("optimizer %+v, want %+v", back.Optimizer, tc.want)
			}
			if len(back.Layers) != len(m.Layers) || back.Name != m.Name || back.Input != m.Input {
				t.Errorf("model changed on the way: %+v", back)
			}
		})
	}
}

// FuzzParseJob: any input either parses into a job that trains for at
// least one step or fails with an error; nothing panics.
func FuzzParseJob(f *testing.F) {
	f.Add([]byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n"))
	f.Add([]byte("model = \"m\"\ndata = \"d\"\nbatch = 3\nepochs = 0.001\nsamples = 1\n[optimizer]\nkind = \"sgd\"\n"))
	f.Add([]byte("[checkpoint]\nevery = -1\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		j, err := ParseJob("fuzz.toml", src)
		if err != nil {
			return
		}
		if n := j.TotalSteps(); n < 1 || n > maxJobSteps {
			t.Fatalf("%d steps from %q", n, src)
		}
	})
}

func TestJobBatching(t *testing.T) {
	base := "version = 1\nmodel = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 512\nsteps = 10\n"
	j, err := ParseJob("job.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if b := j.Batching; b.Mode != BatchingAuto || b.Interval != 3 || b.Smoothing != 0.5 || b.Deadband != 0.05 || b.MinBatch != 1 {
		t.Errorf("defaults %+v", b)
	}
	j, err = ParseJob("job.toml", []byte(base+"[batching]\nmode = \"dynamic\"\ninterval = 5\ndeadband = 0.05\n"))
	if err != nil || j.Batching.Mode != BatchingDynamic || j.Batching.Interval != 5 || j.Batching.Deadband != 0.05 || j.Batching.Smoothing != 0.5 {
		t.Fatalf("%+v %v", j, err)
	}
	for _, bad := range []struct{ text, field string }{
		{"mode = \"fast\"", "batching.mode"},
		{"interval = -1", "batching.interval"},
		{"smoothing = 1.5", "batching.smoothing"},
		{"deadband = 1", "batching.deadband"},
		{"min_batch = 1000", "batching.min_batch"},
		{"resize = \"restart\"", "batching.resize"}, // without checkpoint.every
		{"resize = \"sideways\"", "batching.resize"},
	} {
		_, err := ParseJob("job.toml", []byte(base+"[batching]\n"+bad.text+"\n"))
		var ce *Error
		if !errors.As(err, &ce) || ce.Field != bad.field || ce.Line != 7 {
			t.Errorf("%s: %v, want an error at line 7 naming %s", bad.text, err, bad.field)
		}
	}
	ckpt := "[checkpoint]\ndir = \"/tmp/c\"\nevery = 5\n"
	j, err = ParseJob("job.toml", []byte(base+ckpt+"[batching]\nresize = \"restart\"\n"))
	if err != nil || j.Batching.Resize != ResizeRestart {
		t.Errorf("kill-restart resizing with checkpoints: %v, resize %q", err, j.Batching.Resize)
	}
	j, err = ParseJob("job.toml", []byte("mode = \"asp\"\n"+base+ckpt+"restarts = 2\n"))
	if err != nil || j.Checkpoint.Restarts != 2 {
		t.Errorf("an ASP job restarted from its checkpoints: %v", err)
	}
	_, err = ParseJob("job.toml", []byte("mode = \"asp\"\n"+base+ckpt+"[batching]\nresize = \"restart\"\n"))
	if ce := (*Error)(nil); !errors.As(err, &ce) || ce.Field != "batching.resize" {
		t.Errorf("kill-restart resizing of an ASP job: %v, want an error naming batching.resize", err)
	}
}

// checkpoint.keep defaults to DefaultCheckpointKeep; 0 keeps every
// checkpoint.
func TestCheckpointKeep(t *testing.T) {
	for src, want := range map[string]int{"": DefaultCheckpointKeep, "keep = 2\n": 2, "keep = 0\n": 0} {
		j, err := ParseJob("job.toml", []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n[checkpoint]\ndir = \"/x\"\nevery = 5\n"+src))
		if err != nil {
			t.Fatal(err)
		}
		if *j.Checkpoint.Keep != want || j.Checkpoint.KeepAll() != (want == 0) {
			t.Errorf("%q: keep %d (all: %v), want %d", src, *j.Checkpoint.Keep, j.Checkpoint.KeepAll(), want)
		}
	}
}
