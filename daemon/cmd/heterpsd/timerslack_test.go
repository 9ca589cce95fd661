package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/heterps/heterps/internal/timerslack"
)

// asDaemonEnv makes the test binary run as heterpsd (TestMain): the timer
// slack is read before the runtime starts, so only a new process sees a
// value a test gives it.
const asDaemonEnv = "HETERPSD_TEST_AS_DAEMON"

func TestMain(m *testing.M) {
	if os.Getenv(asDaemonEnv) == "1" {
		os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestUnreadableTimerSlackIsRefusedByName(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--role=node", "--config", "/nonexistent/node.toml")
	cmd.Env = append(os.Environ(), asDaemonEnv+"=1", timerslack.Env+"=1.5ms")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitUsage {
		t.Fatalf("exit %v, want status %d; output %s", err, exitUsage, out)
	}
	if !strings.Contains(string(out), timerslack.Env+`="1.5ms"`) || strings.Contains(string(out), "node.toml") {
		t.Errorf("output %q: want the variable and its value named before the node file is read", out)
	}
}

func TestTheDaemonLogsItsTimerSlack(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--role=node", "--config", "/nonexistent/node.toml")
	cmd.Env = append(os.Environ(), asDaemonEnv+"=1", timerslack.Env+"=3ms")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "timer slack") || !strings.Contains(string(out), "slack=3ms") {
		t.Errorf("output %q: want the timer slack logged at start", out)
	}
}
