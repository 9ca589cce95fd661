package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunKilledTakesItsDaemonsWithIt: heterps run killed with SIGKILL,
// which cannot stop its children itself, leaves no daemon running. The
// coordinator the fake daemons play never answers, so run waits for the
// nodes to register when it is killed.
func TestRunKilledTakesItsDaemonsWithIt(t *testing.T) {
	run, started := runWithFakeDaemons(t, "", "exec sleep 60\n")
	run.Process.Kill()
	run.Wait()
	for _, pid := range started {
		if !processEnds(pid, 10*time.Second) {
			t.Errorf("daemon %d still runs 10 s after heterps run was killed", pid)
		}
	}
}

// TestCtrlCReachesOnlyRun: Ctrl-C at a terminal signals the whole
// foreground process group; heterps run's daemons, each in a group of its
// own, do not get it, and are stopped by run (SIGTERM) once it is done
// with them — the daemons it asks for a checkpoint first must still be
// there. The fake daemons record the signals they get.
func TestCtrlCReachesOnlyRun(t *testing.T) {
	signals := filepath.Join(t.TempDir(), "signals")
	run, started := runWithFakeDaemons(t, "trap 'echo INT >> "+signals+"; kill $s; exit 1' INT\n"+
		"trap 'echo TERM >> "+signals+"; kill $s; exit 0' TERM\n", "sleep 60 & s=$!\nwait $s\n")
	if err := syscall.Kill(-run.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		run.Process.Kill()
		t.Fatal("heterps run still runs 30 s after Ctrl-C")
	}
	for _, pid := range started {
		if !processEnds(pid, 10*time.Second) {
			t.Errorf("daemon %d still runs after heterps run stopped", pid)
		}
	}
	got, _ := os.ReadFile(signals)
	if n := strings.Count(string(got), "TERM"); strings.Contains(string(got), "INT") || n != len(started) {
		t.Errorf("the daemons got %q; want SIGTERM from run each, never the terminal's SIGINT", strings.Fields(string(got)))
	}
}

// runWithFakeDaemons starts heterps run on make run's job in a process
// group of its own (as a terminal runs it in the foreground), its daemons
// a script that runs before, records its pid, prints the first line
// heterps waits for (a coordinator that never answers) and runs after; it
// returns once the coordinator and the local catalog's three nodes have
// recorded theirs, with the pids (killed when the test ends).
func runWithFakeDaemons(t *testing.T, before, after string) (run *exec.Cmd, started []int) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh(1)")
	}
	dir := t.TempDir()
	pids, fake := filepath.Join(dir, "pids"), filepath.Join(dir, "heterpsd")
	script := "#!/bin/sh\n" + before + "echo $$ >> " + pids + "\n" +
		"case \"$1\" in --role=coordinator) echo coordinator http://127.0.0.1:1 ;; *) echo node ;; esac\n" + after
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	run = exec.Command(os.Args[0], "run", "--heterpsd", fake, "--catalog", "../../config/examples/catalogs/local.toml",
		"--log-dir", filepath.Join(dir, "logs"), "--pin=false", "../../config/examples/jobs/ctrdnn-local.toml")
	run.Env = append(os.Environ(), asHeterpsEnv+"=1")
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	started = waitForPids(t, pids, 4)
	t.Cleanup(func() {
		for _, pid := range started {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return run, started
}

// waitForPids waits up to 30 s for n pids in the file.
func waitForPids(t *testing.T, file string, n int) []int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(file)
		fields := strings.Fields(string(b))
		if len(fields) >= n {
			var pids []int
			for _, f := range fields {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("%s: %q", file, b)
				}
				pids = append(pids, pid)
			}
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d daemons started within 30 s", len(fields), n)
		}
	}
}

// processEnds reports whether pid exits (or is left a zombie) within d.
func processEnds(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if processGone(pid) {
			return true
		}
	}
	return false
}

// processGone reports whether pid has exited: no such process, or a
// zombie nobody has reaped.
func processGone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')') // pid (comm) STATE ...
	return i > 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}
