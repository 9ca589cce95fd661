package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/heterps/heterps/internal/timerslack"
)

// TestMain runs the test binary as heterps when a test started it as a
// child process of a command (profile's replica processes).
func TestMain(m *testing.M) {
	if os.Getenv(asHeterpsEnv) == "1" {
		os.Exit(dispatch(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func TestUnreadableTimerSlackIsRefusedByName(t *testing.T) {
	cmd := exec.Command(os.Args[0], "plan", "--model", "ctrdnn", "--catalog", "local")
	cmd.Env = append(os.Environ(), asHeterpsEnv+"=1", timerslack.Env+"=2s")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitUsage {
		t.Fatalf("exit %v, want status %d; output %s", err, exitUsage, out)
	}
	if !strings.Contains(string(out), timerslack.Env+`="2s"`) {
		t.Errorf("output %q does not name the variable and its value", out)
	}
}
