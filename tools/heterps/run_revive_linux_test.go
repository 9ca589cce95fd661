package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/syncbuf"
)

// TestRunRestartsADeadCoordinator: heterps run whose coordinator is
// killed mid-job starts it again on its port and state directory; the
// nodes find it, it takes the job up, and the run ends as one that was
// never disturbed.
func TestRunRestartsADeadCoordinator(t *testing.T) {
	if testing.Short() {
		t.Skip("builds heterpsd and runs daemons")
	}
	const steps = 4000
	bin, jobPath, _, catalog := tinyJob(t, steps)
	run := startRun(t, bin, jobPath, catalog)
	url := waitTraining(t, &run.stderr, run.done)
	coordinator := coordinatorPid(t, run.logs)
	if err := syscall.Kill(coordinator, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := run.result(t, "the coordinator exited (signal: killed); starting it again on its state (restart 1 of")
	if r.State != api.JobDone || r.Steps != steps || r.Job != "j1" {
		t.Errorf("result %+v, want job j1 done at step %d (%s)", r, steps, url)
	}
	if again := coordinatorPidOrZero(run.logs); again == coordinator {
		t.Errorf("the killed coordinator %d is still listed", coordinator)
	}
}

// aRun is heterps run --json of a job on its own goroutine.
type aRun struct {
	logs           string
	stdout, stderr syncbuf.Buffer
	done           chan int
}

// startRun runs the job file on the catalog with the heterpsd binary,
// heartbeats every 50 ms, its daemons' files under a directory of the
// test's.
func startRun(t *testing.T, bin, jobPath, catalog string) *aRun {
	t.Helper()
	r := &aRun{logs: t.TempDir(), done: make(chan int, 1)}
	go func() {
		r.done <- runRun(context.Background(), []string{jobPath, "--catalog", catalog, "--heterpsd", bin, "--json",
			"--timeout", "3m", "--heartbeat", "50ms", "--log-dir", r.logs}, &r.stdout, &r.stderr)
	}()
	return r
}

// result waits for the run to end well, with notice among its notices,
// and returns what it printed.
func (r *aRun) result(t *testing.T, notice string) runResult {
	t.Helper()
	select {
	case code := <-r.done:
		if code != exitOK {
			t.Fatalf("exit %d\nstderr %s", code, r.stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the run did not end\nstderr %s", r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), notice) {
		t.Errorf("no notice %q: %s", notice, r.stderr.String())
	}
	var res runResult
	if err := json.Unmarshal([]byte(r.stdout.String()), &res); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout.String())
	}
	return res
}

// waitTraining waits until the run's job has trained a step and returns
// its coordinator's URL.
func waitTraining(t *testing.T, stderr *syncbuf.Buffer, done <-chan int) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for ; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("the run ended (exit %d) before the coordinator was killed: %s", code, stderr.String())
		default:
		}
		_, rest, ok := strings.Cut(stderr.String(), "and a coordinator at ")
		if !ok {
			continue
		}
		url := strings.Fields(rest)[0]
		resp, err := http.Get(url + "/v1/jobs/j1")
		if err != nil {
			continue
		}
		var s api.JobStatus
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err == nil && s.Step > 0 {
			return url
		}
	}
	t.Fatalf("the job trained no step within 2 minutes: %s", stderr.String())
	return ""
}

// coordinatorPid is the pid of the coordinator whose state lies under
// logs.
func coordinatorPid(t *testing.T, logs string) int {
	t.Helper()
	return daemonPid(t, logs, "--role=coordinator", "")
}

func coordinatorPidOrZero(logs string) int { return findDaemon(logs, "--role=coordinator", "") }

// TestRunGivesUpOnACoordinatorThatKeepsDying: a coordinator restarted
// daemonRestarts times within the window that dies again ends the
// run with the reason, instead of being restarted for ever.
func TestRunGivesUpOnACoordinatorThatKeepsDying(t *testing.T) {
	dead := exec.Command("sh", "-c", "exit 3")
	if err := dead.Run(); err == nil {
		t.Skip("no sh(1) that exits 3")
	}
	exited := make(chan struct{})
	close(exited)
	kids := &children{procs: []*child{{cmd: dead, log: "coordinator.log", exited: exited}}}
	c := newCoordClient("http://127.0.0.1:1") // nothing listens there: every call fails at once
	defer c.close()
	revived := 0
	var notices syncbuf.Buffer
	_, err := waitReviving(context.Background(), c, kids, "j1", func(api.JobStatus) {}, &notices, "heterps run",
		&reviver{coordinator: func(context.Context) error { revived++; return nil }})
	if revived != daemonRestarts || err == nil || !strings.Contains(err.Error(), "the coordinator exited (exit status 3), 4 times in 10m0s; not restarted again") {
		t.Errorf("revived %d times, err %v; want %d restarts and the reason", revived, err, daemonRestarts)
	}
	if got := strings.Count(notices.String(), "starting it again on its state"); got != daemonRestarts {
		t.Errorf("%d restart notices, want %d: %s", got, daemonRestarts, notices.String())
	}
}

// TestRunRestartsADeadNodeDaemon: a node daemon of heterps run killed
// mid-job is started again; the job, with checkpoint.restarts, restarts
// from its checkpoint once the node is back (its stage has no other node
// to go to, so it waits queued for it instead of being given up) and ends
// at its last step.
func TestRunRestartsADeadNodeDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds heterpsd and runs daemons")
	}
	const steps = 6000
	bin, jobPath, src, catalog := tinyJob(t, steps)
	ckptDir := t.TempDir()
	writeFile(t, jobPath, src+fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 100\nrestarts = 3\n", ckptDir), 0o600)
	run := startRun(t, bin, jobPath, catalog)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if written, _ := filepath.Glob(filepath.Join(ckptDir, "step-*", "manifest.json")); len(written) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint within 2 minutes: %s", run.stderr.String())
		}
	}
	node := daemonPid(t, run.logs, "--role=node", "gpu")
	if err := syscall.Kill(node, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := run.result(t, "gpu exited (signal: killed); starting it again (restart 1 of")
	if r.State != api.JobDone || r.Steps != steps || r.RestoredFrom == nil {
		t.Errorf("result %+v, want a restarted job done at step %d", r, steps)
	}
}

// daemonPid is the pid of the live daemon whose command line holds role,
// has its files under logs, and mentions name.
func daemonPid(t *testing.T, logs, role, name string) int {
	t.Helper()
	pid := findDaemon(logs, role, name)
	if pid == 0 {
		t.Fatalf("no live %s daemon %q with its files under %s", role, name, logs)
	}
	return pid
}

// findDaemon is daemonPid's pid, 0 when there is none.
func findDaemon(logs, role, name string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		line := string(cmdline)
		if err != nil || !strings.Contains(line, role) || !strings.Contains(line, logs) || !strings.Contains(line, name) {
			continue
		}
		if pid, err := strconv.Atoi(e.Name()); err == nil && !processGone(pid) {
			return pid
		}
	}
	return 0
}

// TestNodeReviverWaitsBeforeARestart: a dead node daemon is started again
// only once its delay has passed (the coordinator still holds its name
// until it has missed three heartbeats), with its own arguments, and a
// queued job is waited for from its death on.
func TestNodeReviverWaitsBeforeARestart(t *testing.T) {
	dir := t.TempDir()
	marks := filepath.Join(dir, "started")
	node := exec.Command("sh", "-c", "echo started >> "+marks+"; echo node")
	if err := node.Run(); err != nil {
		t.Skipf("no sh(1): %v", err)
	}
	exited := make(chan struct{})
	close(exited)
	kids := &children{procs: []*child{
		{cmd: exec.Command("true"), log: filepath.Join(dir, "coordinator.log"), exited: make(chan struct{})},
		{cmd: node, log: filepath.Join(dir, "local-0.cpu.log"), exited: exited},
	}}
	defer func() { // the restarted daemon has exited (below); its pipes and log are closed
		kids.readers.Wait()
		for _, f := range kids.logs {
			f.Close()
		}
	}()
	var notices syncbuf.Buffer
	r := &nodeReviver{kids: kids, notices: &notices, what: "heterps run", after: 300 * time.Millisecond,
		limit: restartLimit{}, deadSince: map[string]time.Time{}, given: map[string]bool{}}
	r.reviveDead()
	if kids.procs[1].cmd != node || !r.returning() {
		t.Fatalf("restarted at once (or not taken as returning): %s", notices.String())
	}
	time.Sleep(400 * time.Millisecond)
	r.reviveDead()
	if kids.procs[1].cmd == node || !strings.Contains(notices.String(), "node daemon local-0.cpu exited (exit status 0); starting it again (restart 1 of") {
		t.Fatalf("not restarted after its delay: %s", notices.String())
	}
	<-kids.procs[1].exited
	if got, _ := os.ReadFile(marks); string(got) != "started\nstarted\n" {
		t.Errorf("the daemon ran %q, want twice with its own arguments", got)
	}
}
