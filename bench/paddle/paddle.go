package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heterps/heterps/bench/internal/heterpsrun"
	"github.com/heterps/heterps/internal/tether"
)

// scriptDir finds bench/paddle's Python scripts from the working directory
// (make bench runs from the repository root).
func scriptDir() (string, error) {
	for _, d := range []string{"bench/paddle", "."} {
		if _, err := os.Stat(filepath.Join(d, "ctrdnn_ps.py")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("cannot find ctrdnn_ps.py; run from the repository root")
}

// singleResult is what ctrdnn_single.py prints.
type singleResult struct {
	Paddle      string  `json:"paddle"`
	SamplesPerS float64 `json:"samples_per_s"`
	Loss        float64 `json:"loss_last50"`
	Steps       int     `json:"steps"`
	Batch       int     `json:"batch"`
	CPU         float64 `json:"cpu_seconds"`
}

// paddleSingle trains with Paddle in one process on threads threads.
func paddleSingle(ctx context.Context, o options, dir string, threads int) measured {
	scripts, err := scriptDir()
	if err != nil {
		return measured{err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.python, filepath.Join(scripts, "ctrdnn_single.py"), "--data", dir,
		"--threads", strconv.Itoa(threads), "--steps", strconv.Itoa(o.steps), "--warmup", strconv.Itoa(o.warmup))
	cmd.Env = append(os.Environ(), threadEnv(threads)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Through tether: with the timer slack this process inherited, as from
	// a shell (package timerslack).
	if err := tether.Run(cmd); err != nil {
		return measured{err: fmt.Errorf("%s ctrdnn_single.py: %w: %s", o.python, err, heterpsrun.Tail(stderr.Bytes()))}
	}
	var r singleResult
	if err := lastJSON(stdout.Bytes(), &r); err != nil {
		return measured{err: fmt.Errorf("ctrdnn_single.py: %w", err)}
	}
	return measured{samplesPerS: r.SamplesPerS, loss: r.Loss, samples: float64(r.Steps * r.Batch), cpuSeconds: r.CPU}
}

// threadEnv caps a Paddle process's math libraries at threads threads.
func threadEnv(threads int) []string {
	t := strconv.Itoa(threads)
	return []string{"OMP_NUM_THREADS=" + t, "MKL_NUM_THREADS=" + t, "CPU_NUM=" + t}
}

// lastJSON decodes the last non-empty line of out into v.
func lastJSON(out []byte, v any) error {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return errors.New("printed no result")
	}
	if err := json.Unmarshal([]byte(last), v); err != nil {
		return fmt.Errorf("result line %q: %w", last, err)
	}
	return nil
}

// workerResult is what each ctrdnn_ps.py worker prints: its timed window
// in wall-clock seconds since the epoch.
type workerResult struct {
	Worker int     `json:"worker"`
	Steps  int     `json:"steps"`
	Batch  int     `json:"batch"`
	Start  float64 `json:"start"`
	End    float64 `json:"end"`
	Loss   float64 `json:"loss_last50"`
	CPU    float64 `json:"cpu_seconds"`        // the worker's, in its window
	Server float64 `json:"server_cpu_seconds"` // the server's, in the worker's window
}

// aggregate is the PS job's throughput: all workers' timed samples over
// the union of their timed windows (a barrier starts them together, but
// they end apart: this is the lower of the two honest readings, the sum of
// each worker's own rate the higher), their mean loss, and the CPU of the
// workers and the server (the largest server figure a worker saw: their
// windows overlap).
func aggregate(ws []workerResult) (measured, error) {
	if len(ws) == 0 {
		return measured{}, errors.New("no worker results")
	}
	start, end := ws[0].Start, ws[0].End
	samples, loss, cpu, server := 0, 0.0, 0.0, 0.0
	for _, w := range ws {
		start, end = min(start, w.Start), max(end, w.End)
		samples += w.Steps * w.Batch
		loss += w.Loss
		cpu += w.CPU
		server = max(server, w.Server)
	}
	if end <= start {
		return measured{}, fmt.Errorf("workers' timed windows [%f, %f] are empty", start, end)
	}
	return measured{samplesPerS: float64(samples) / (end - start), loss: loss / float64(len(ws)),
		samples: float64(samples), cpuSeconds: cpu + server}, nil
}

// psEnv is the fleet role environment shared by every process of a job of
// one server on ports[0] and workers on ports[1:], all on loopback. Gloo,
// rendezvous through files in glooDir, makes fleet's worker barriers real:
// without it they return at once, and worker 1 pulls the dense parameters
// before worker 0 has pushed their initial values (it then trains an
// all-zero network, loss ln 2).
func psEnv(ports []int, glooDir string) []string {
	var workers []string
	for _, p := range ports[1:] {
		workers = append(workers, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return []string{
		fmt.Sprintf("PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:%d", ports[0]),
		"PADDLE_TRAINER_ENDPOINTS=" + strings.Join(workers, ","),
		fmt.Sprintf("PADDLE_TRAINERS_NUM=%d", len(ports)-1),
		"POD_IP=127.0.0.1",
		"PADDLE_WITH_GLOO=1", "PADDLE_GLOO_RENDEZVOUS=2", "PADDLE_GLOO_FS_PATH=" + glooDir,
	}
}

// roleEnv is the environment of the server (worker < 0) or of worker i.
func roleEnv(ports []int, worker int) []string {
	if worker < 0 {
		return []string{"TRAINING_ROLE=PSERVER", fmt.Sprintf("PADDLE_PORT=%d", ports[0])}
	}
	return []string{"TRAINING_ROLE=TRAINER", fmt.Sprintf("PADDLE_TRAINER_ID=%d", worker), fmt.Sprintf("PADDLE_PORT=%d", ports[1+worker])}
}

// freePorts asks the kernel for n free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// paddlePSRun runs Paddle's parameter-server job: one server and
// psWorkers workers of one thread each, async.
func paddlePSRun(ctx context.Context, o options, dir string) measured {
	scripts, err := scriptDir()
	if err != nil {
		return measured{err: err}
	}
	ports, err := freePorts(1 + psWorkers)
	if err != nil {
		return measured{err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var serverPID int
	command := func(worker int) *exec.Cmd {
		cmd := exec.CommandContext(ctx, o.pythonPS, filepath.Join(scripts, "ctrdnn_ps.py"), "--data", dir,
			"--steps", strconv.Itoa(o.steps), "--warmup", strconv.Itoa(o.warmup))
		cmd.Env = append(append(append(os.Environ(), threadEnv(1)...), psEnv(ports, filepath.Join(dir, "gloo"))...), roleEnv(ports, worker)...)
		if worker >= 0 {
			cmd.Env = append(cmd.Env, fmt.Sprintf("BENCH_PS_SERVER_PID=%d", serverPID))
		}
		cmd.WaitDelay = 10 * time.Second // a killed worker's children may hold its pipes
		return cmd
	}
	server := command(-1)
	var serverErr bytes.Buffer
	server.Stderr = &serverErr
	if err := tether.Start(server); err != nil {
		return measured{err: fmt.Errorf("paddle PS server: %w", err)}
	}
	serverPID = server.Process.Pid
	results, err := runWorkers(ctx, cancel, command)
	server.Process.Kill() // it serves until killed; it has nothing to save
	server.Wait()
	if err != nil {
		return measured{err: fmt.Errorf("%w (server: %s)", err, heterpsrun.Tail(serverErr.Bytes()))}
	}
	m, err := aggregate(results)
	if err != nil {
		return measured{err: err}
	}
	return m
}

// runWorkers runs the workers to their end; the first to fail cancels the
// others.
func runWorkers(ctx context.Context, cancel context.CancelFunc, command func(worker int) *exec.Cmd) ([]workerResult, error) {
	results := make([]workerResult, psWorkers)
	errs := make([]error, psWorkers)
	var wg sync.WaitGroup
	for i := range psWorkers {
		cmd := command(i)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		wg.Go(func() {
			if err := tether.Run(cmd); err != nil {
				errs[i] = fmt.Errorf("paddle PS worker %d: %w: %s", i, err, heterpsrun.Tail(stderr.Bytes()))
				cancel()
				return
			}
			if err := lastJSON(stdout.Bytes(), &results[i]); err != nil {
				errs[i] = fmt.Errorf("paddle PS worker %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, ctx.Err()
}
