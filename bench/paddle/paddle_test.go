package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAggregateCountsSamplesOverTheUnionOfWindows(t *testing.T) {
	m, err := aggregate([]workerResult{
		{Worker: 0, Steps: 10, Batch: 100, Start: 100, End: 102, Loss: 0.4, CPU: 1.5, Server: 0.5},
		{Worker: 1, Steps: 10, Batch: 100, Start: 101, End: 104, Loss: 0.6, CPU: 2, Server: 0.75},
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.samplesPerS != 2000.0/4 || m.loss != 0.5 || m.samples != 2000 || m.cpuSeconds != 4.25 {
		t.Fatalf("aggregate = %+v, want 500 samples/s (2000 samples over [100, 104]), loss 0.5, 4.25 CPU s (both workers' and the larger server figure)", m)
	}
	if _, err := aggregate(nil); err == nil {
		t.Fatal("aggregate of no workers: no error")
	}
	if _, err := aggregate([]workerResult{{Steps: 1, Batch: 1, Start: 5, End: 5}}); err == nil {
		t.Fatal("aggregate of an empty window: no error")
	}
}

func TestLastJSONSkipsTheNoiseBefore(t *testing.T) {
	var r singleResult
	if err := lastJSON([]byte("W1201 a warning\n{\"paddle\": \"3.3.1\", \"samples_per_s\": 12.5, \"loss_last50\": 0.3}\n\n"), &r); err != nil {
		t.Fatal(err)
	}
	if r.Paddle != "3.3.1" || r.SamplesPerS != 12.5 || r.Loss != 0.3 {
		t.Fatalf("lastJSON = %+v", r)
	}
	if err := lastJSON([]byte("  \n"), &r); err == nil {
		t.Fatal("lastJSON of nothing: no error")
	}
	if err := lastJSON([]byte("Traceback: boom\n"), &r); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("lastJSON of a traceback: %v", err)
	}
}

func TestPSEnvNamesTheRolesAndMakesBarriersReal(t *testing.T) {
	env := psEnv([]int{7000, 7001, 7002}, "/g")
	for _, want := range []string{"PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:7000", "PADDLE_TRAINER_ENDPOINTS=127.0.0.1:7001,127.0.0.1:7002",
		"PADDLE_TRAINERS_NUM=2", "POD_IP=127.0.0.1", "PADDLE_WITH_GLOO=1", "PADDLE_GLOO_RENDEZVOUS=2", "PADDLE_GLOO_FS_PATH=/g"} {
		if !slices.Contains(env, want) {
			t.Errorf("psEnv lacks %s: %v", want, env)
		}
	}
	if got := roleEnv([]int{7000, 7001, 7002}, 1); !slices.Equal(got, []string{"TRAINING_ROLE=TRAINER", "PADDLE_TRAINER_ID=1", "PADDLE_PORT=7002"}) {
		t.Errorf("roleEnv(worker 1) = %v", got)
	}
	if got := roleEnv([]int{7000, 7001, 7002}, -1); !slices.Equal(got, []string{"TRAINING_ROLE=PSERVER", "PADDLE_PORT=7000"}) {
		t.Errorf("roleEnv(server) = %v", got)
	}
}

// fakePython writes a stand-in for the PS interpreter: the server serves
// until killed, each worker prints noise and a result, or as body says.
func fakePython(t *testing.T, worker string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\ncase \"$TRAINING_ROLE\" in\nPSERVER) exec sleep 300 ;;\nTRAINER)\n" + worker + "\n;;\nesac\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPaddlePSRunAddsTheWorkersAndStopsTheServer(t *testing.T) {
	// Each worker checks that it was told the server's pid, for the
	// server's CPU time.
	py := fakePython(t, `[ -n "$BENCH_PS_SERVER_PID" ] && [ -d "/proc/$BENCH_PS_SERVER_PID" ] || { echo "no server pid" >&2; exit 1; }
echo "I1201 log line"; echo "{\"worker\": $PADDLE_TRAINER_ID, \"steps\": 10, \"batch\": 4, \"start\": 100, \"end\": 101, \"loss_last50\": 0.5}"`)
	start := time.Now()
	m := paddlePSRun(t.Context(), options{pythonPS: py, steps: 10, batch: 4, timeout: time.Minute}, t.TempDir())
	if m.err != nil {
		t.Fatal(m.err)
	}
	if m.samplesPerS != 80 || m.loss != 0.5 {
		t.Fatalf("paddlePSRun = %+v, want 80 samples/s (2 x 40 samples in 1 s), loss 0.5", m)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("paddlePSRun took %v: the server was not stopped", d)
	}
}

func TestPaddlePSRunStopsTheOtherWorkersWhenOneFails(t *testing.T) {
	py := fakePython(t, `if [ "$PADDLE_TRAINER_ID" = 1 ]; then echo "ValueError: boom" >&2; exit 3; fi; exec sleep 300`)
	start := time.Now()
	m := paddlePSRun(t.Context(), options{pythonPS: py, steps: 10, batch: 4, timeout: time.Minute}, t.TempDir())
	if m.err == nil || !strings.Contains(m.err.Error(), "worker 1") || !strings.Contains(m.err.Error(), "boom") {
		t.Fatalf("paddlePSRun error = %v, want worker 1's failure and its stderr", m.err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("paddlePSRun took %v: worker 0 was not stopped", d)
	}
}

func TestReportPrintsRatiosAndWhyFiguresAreMissing(t *testing.T) {
	r := report{
		single: []singleRow{
			{threads: 1, heterps: measured{samplesPerS: 3000, loss: 0.3, samples: 600, cpuSeconds: 0.2}, paddle: measured{samplesPerS: 1000, loss: 0.4}},
			{threads: 2, heterps: measured{samplesPerS: 6000, loss: 0.3}, paddle: measured{err: errors.New("no module named paddle")}},
		},
		heterpsPS:        measured{samplesPerS: 5000, loss: 0.3},
		heterpsPSMatched: measured{err: errors.New("node lost")},
		heterpsASP:       measured{samplesPerS: 7000, loss: 0.3},
		paddlePS:         measured{samplesPerS: 2000, loss: 0.5},
	}
	var b strings.Builder
	r.print(&b)
	var lines []string // with runs of spaces as one
	for l := range strings.SplitSeq(b.String(), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	out := strings.Join(lines, "\n")
	for _, want := range []string{"1 3000 1000 3.00x 3000 - 0.3000 0.4000", "2 6000 not measured - - - 0.3000 -",
		"Paddle single process, 2 threads: no module named paddle", ": 2000 samples/s",
		"heterps train - 3.00x", "heterps run, 2 nodes, job batch = worker batch - 2.50x",
		"heterps run, 2 nodes, replica batch = worker batch - -", "heterps run, replica batch = worker batch: node lost",
		"replicas asynchronous (mode = \"asp\", as Paddle's workers are): 7000 samples/s",
		"heterps run, 2 nodes, job batch = worker batch, ASP (Paddle's mode) - 3.50x"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestParseThreads(t *testing.T) {
	o := options{steps: 1, batch: 1, batches: 2}
	if err := parseThreads(&o, "1, 2"); err != nil || !slices.Equal(o.threads, []int{1, 2}) {
		t.Fatalf("parseThreads = %v, %v", o.threads, err)
	}
	for _, bad := range []string{"0", "x", ""} {
		if err := parseThreads(&options{steps: 1, batch: 1, batches: 2}, bad); err == nil {
			t.Errorf("parseThreads(%q) accepted", bad)
		}
	}
	if err := parseThreads(&options{steps: 1, batch: 1, batches: 1}, "1"); err == nil {
		t.Error("one batch for two workers accepted")
	}
}
