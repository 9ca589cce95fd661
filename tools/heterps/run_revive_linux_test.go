package main

import (
	"context"
	"encoding/json"
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
	logs := t.TempDir()
	var out, errb syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runRun(context.Background(), []string{jobPath, "--catalog", catalog, "--heterpsd", bin, "--json",
			"--timeout", "3m", "--heartbeat", "50ms", "--log-dir", logs}, &out, &errb)
	}()
	url := waitTraining(t, &errb, done)
	coordinator := coordinatorPid(t, logs)
	if err := syscall.Kill(coordinator, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after the coordinator was killed\nstderr %s", code, errb.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the run did not end\nstderr %s", errb.String())
	}
	if !strings.Contains(errb.String(), "the coordinator exited (signal: killed); starting it again on its state (restart 1 of") {
		t.Errorf("no notice of the restart: %s", errb.String())
	}
	var r runResult
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if r.State != api.JobDone || r.Steps != steps || r.Job != "j1" {
		t.Errorf("result %+v, want job j1 done at step %d (%s)", r, steps, url)
	}
	if again := coordinatorPidOrZero(logs); again == coordinator {
		t.Errorf("the killed coordinator %d is still listed", coordinator)
	}
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
	pid := coordinatorPidOrZero(logs)
	if pid == 0 {
		t.Fatalf("no coordinator process with its state under %s", logs)
	}
	return pid
}

func coordinatorPidOrZero(logs string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "--role=coordinator") || !strings.Contains(string(cmdline), logs) {
			continue
		}
		if pid, err := strconv.Atoi(e.Name()); err == nil && !processGone(pid) {
			return pid
		}
	}
	return 0
}

// TestRunGivesUpOnACoordinatorThatKeepsDying: a coordinator restarted
// coordinatorRestarts times within the window that dies again ends the
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
		func(context.Context) error { revived++; return nil })
	if revived != coordinatorRestarts || err == nil || !strings.Contains(err.Error(), "the coordinator exited (exit status 3), 4 times in 10m0s; not restarted again") {
		t.Errorf("revived %d times, err %v; want %d restarts and the reason", revived, err, coordinatorRestarts)
	}
	if got := strings.Count(notices.String(), "starting it again on its state"); got != coordinatorRestarts {
		t.Errorf("%d restart notices, want %d: %s", got, coordinatorRestarts, notices.String())
	}
}
