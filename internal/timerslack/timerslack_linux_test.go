package timerslack

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary plays the child of these tests: with childEnv set it
// prints its own thread's slack, what the constructor did, and its error.
const childEnv = "TIMERSLACK_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		s, err := Current()
		fmt.Printf("%d %d %d\n%v\n", Thread(), s.Inherited, s.Set, err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type childReport struct {
	thread, inherited, set time.Duration
	err                    string
}

// child runs the test binary with Env set to value (unset if absent).
func child(t *testing.T, value string, set bool) childReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	if set {
		cmd.Env = append(cmd.Env, Env+"="+value)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	lines := strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)
	var r childReport
	if _, err := fmt.Sscan(lines[0], &r.thread, &r.inherited, &r.set); err != nil || len(lines) != 2 {
		t.Fatalf("child printed %q", out)
	}
	r.err = lines[1]
	return r
}

func wantVariableUnset(t *testing.T) {
	if v, ok := os.LookupEnv(Env); ok {
		t.Skipf("%s=%q in this test's environment", Env, v)
	}
}

func TestEveryThreadHasTheDefaultSlack(t *testing.T) {
	wantVariableUnset(t)
	if got := Thread(); got != Default {
		t.Errorf("this thread's slack is %v, want %v", got, Default)
	}
	// Threads the runtime starts later inherit it from the thread that starts them.
	const n = 4
	got := make(chan time.Duration, n)
	release := make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread() // n goroutines locked at once need n threads
			got <- Thread()
			<-release
		}()
	}
	for range n {
		if s := <-got; s != Default {
			t.Errorf("a thread's slack is %v, want %v", s, Default)
		}
	}
	close(release)
	s, err := Current()
	if err != nil || s.Set != Default {
		t.Errorf("Current() = %+v, %v; want Set %v", s, err, Default)
	}
}

func TestTheVariableSetsTheSlack(t *testing.T) {
	for value, want := range map[string]time.Duration{
		"250us": 250 * time.Microsecond, "3ms": 3 * time.Millisecond, "80000ns": 80 * time.Microsecond, "10ms": 10 * time.Millisecond, "7µs": 7 * time.Microsecond,
	} {
		r := child(t, value, true)
		if r.thread != want || r.set != want || r.err != "<nil>" {
			t.Errorf("%s=%s: thread %v, set %v, error %s; want %v and no error", Env, value, r.thread, r.set, r.err, want)
		}
	}
}

func TestZeroLeavesTheInheritedSlack(t *testing.T) {
	for _, value := range []string{"0", ""} {
		r := child(t, value, true)
		if value == "" {
			if r.set != Default { // an empty variable is an unset one
				t.Errorf("%s empty: set %v, want the default %v", Env, r.set, Default)
			}
			continue
		}
		if r.set != 0 || r.thread != r.inherited || r.err != "<nil>" {
			t.Errorf("%s=0: thread %v, set %v (inherited %v), error %s; want the inherited slack kept", Env, r.thread, r.set, r.inherited, r.err)
		}
	}
}

func TestUnreadableValuesKeepTheSlackAndSaySo(t *testing.T) {
	for _, value := range []string{"abc", "1.5ms", "-1ms", " 1ms", "+1ms", "1s", "11ms", "10001us", "1µ", "1sec", "5", "ms", "1msx", "99999999999999999999999ns"} {
		r := child(t, value, true)
		if r.set != 0 || r.thread != r.inherited {
			t.Errorf("%s=%q: thread %v, set %v; want the inherited %v kept", Env, value, r.thread, r.set, r.inherited)
		}
		if !strings.Contains(r.err, Env) || !strings.Contains(r.err, strconv.Quote(value)) {
			t.Errorf("%s=%q: error %q does not name the variable and its value", Env, value, r.err)
		}
	}
}

func TestRestoredThreadForksChildrenWithTheInheritedSlack(t *testing.T) {
	wantVariableUnset(t)
	s, _ := Current()
	if s.Inherited == s.Set {
		t.Skipf("this test inherited the slack it sets (%v): nothing to tell apart", s.Inherited)
	}
	// The goroutine returns with its thread locked, so the runtime ends the
	// thread rather than run anything else on its restored slack.
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		done <- forkOnRestoredThread(s.Inherited)
	}()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

func forkOnRestoredThread(want time.Duration) error {
	if err := RestoreThread(); err != nil {
		return err
	}
	if got := Thread(); got != want {
		return fmt.Errorf("restored thread's slack %v, want %v", got, want)
	}
	out, err := exec.Command("cat", "/proc/self/timerslack_ns").Output()
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(out)); got != strconv.FormatInt(want.Nanoseconds(), 10) {
		return fmt.Errorf("a child forked from the restored thread has slack %s ns, want %d", got, want.Nanoseconds())
	}
	return nil
}
