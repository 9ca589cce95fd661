package tether

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heterps/heterps/internal/timerslack"
)

// The test binary plays the parent and the child of these tests.
const (
	roleEnv     = "TETHER_TEST_ROLE"
	roleParent  = "parent"  // starts a sleeper through Start, prints its pid, waits to be killed
	roleSleeper = "sleeper" // sleeps until a signal ends it
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case roleParent:
		child := sleeper()
		if err := Start(child); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(strconv.Itoa(child.Process.Pid) + "\n")
		time.Sleep(time.Minute)
		os.Exit(4)
	case roleSleeper:
		time.Sleep(time.Minute)
		os.Exit(5)
	}
	os.Exit(m.Run())
}

func sleeper() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+roleSleeper)
	return cmd
}

// gone reports whether pid has exited (or become a zombie) within d.
func gone(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		// pid (comm) S ...: the state follows the last ')'.
		for i := len(stat) - 1; i > 0; i-- {
			if stat[i] == ')' && i+2 < len(stat) {
				if stat[i+2] == 'Z' || stat[i+2] == 'X' {
					return true
				}
				break
			}
		}
	}
	return false
}

// TestChildEndsWithAKilledParent: a parent killed with SIGKILL, which
// cannot stop its children itself, leaves none running.
func TestChildEndsWithAKilledParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), roleEnv+"="+roleParent)
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		parent.Process.Kill()
		t.Fatalf("the parent printed no child: %v", err)
	}
	pid, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	if gone(pid, 200*time.Millisecond) {
		t.Fatalf("child %d ended while its parent lived", pid)
	}
	parent.Process.Kill()
	parent.Wait()
	if !gone(pid, 10*time.Second) {
		t.Errorf("child %d still runs 10 s after its parent was killed", pid)
	}
}

// TestChildOutlivesTheThreadThatAskedForIt: the death signal waits for
// the process, not for the thread of the goroutine that called Start,
// which the runtime ends when a goroutine locked to it returns.
func TestChildOutlivesTheThreadThatAskedForIt(t *testing.T) {
	child := sleeper()
	var err error
	onThreadThatEnds(t, func() { err = Start(child) })
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		child.Wait()
		close(exited)
	}()
	defer func() {
		child.Process.Kill()
		<-exited
	}()
	select {
	case <-exited:
		t.Fatalf("the child ended when the thread that started it did: %v", child.ProcessState)
	case <-time.After(500 * time.Millisecond):
	}
}

// onThreadThatEnds runs fn on a goroutine locked to a thread other than
// the main one (which the runtime never ends) and returns once that
// goroutine has returned, still locked, and its thread is gone.
func onThreadThatEnds(t *testing.T, fn func()) {
	tid := make(chan int, 1)
	var run func()
	run = func() {
		runtime.LockOSThread()
		if syscall.Gettid() == os.Getpid() { // keep the main thread busy while another goroutine tries
			done := make(chan struct{})
			go func() {
				defer close(done)
				run()
			}()
			<-done
			runtime.UnlockOSThread()
			return
		}
		fn()
		tid <- syscall.Gettid()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run()
	}()
	<-done
	task := "/proc/self/task/" + strconv.Itoa(<-tid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there: the runtime did not end the thread", task)
		}
	}
}

func TestChildrenGetTheTimerSlackThisProcessInherited(t *testing.T) {
	s, err := timerslack.Current()
	if err != nil || s.Set == 0 || s.Inherited == s.Set {
		t.Skipf("timer slack %+v, %v: nothing to tell apart", s, err)
	}
	var out bytes.Buffer
	cat := exec.Command("cat", "/proc/self/timerslack_ns")
	cat.Stdout = &out
	if err := Start(cat); err != nil {
		t.Fatal(err)
	}
	if err := cat.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), strconv.FormatInt(s.Inherited.Nanoseconds(), 10); got != want {
		t.Errorf("child's timer slack %s ns, want the inherited %s (this process runs with %v)", got, want, s.Set)
	}
}

func TestRunWaitsForTheChildAndReturnsItsExit(t *testing.T) {
	var out bytes.Buffer
	cmd := exec.Command("sh", "-c", "sleep 0.1; echo done; exit 3")
	cmd.Stdout = &out
	err := Run(cmd)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Run = %v, want the child's exit status 3", err)
	}
	if out.String() != "done\n" {
		t.Errorf("output %q when Run returned, want the child's whole output", out.String())
	}
}
