package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heterps/heterps/internal/syncbuf"
)

// notification is one datagram the fake systemd got, and when.
type notification struct {
	at  time.Time
	msg string
}

// fakeSystemd listens on a unixgram socket in a temporary directory, as
// systemd's notify socket, and sets NOTIFY_SOCKET to it for the test.
func fakeSystemd(t *testing.T) <-chan notification {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", path)
	out := make(chan notification, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(out)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			out <- notification{at: time.Now(), msg: string(buf[:n])}
		}
	})
	t.Cleanup(func() {
		conn.Close()
		wg.Wait()
	})
	return out
}

// next waits for a notification containing want, returning those seen
// before it.
func next(t *testing.T, ch <-chan notification, want string) (notification, []notification) {
	t.Helper()
	var before []notification
	timeout := time.After(30 * time.Second)
	for {
		select {
		case n, ok := <-ch:
			if !ok {
				t.Fatalf("the notify socket closed before %q", want)
			}
			if strings.Contains(n.msg, want) {
				return n, before
			}
			before = append(before, n)
		case <-timeout:
			t.Fatalf("no %q within 30 s; got %v", want, before)
		}
	}
}

// TestSystemdNotifyCoordinator runs heterpsd's main in this process under a
// fake systemd: READY=1 with a status line once it listens, WATCHDOG=1 at
// half of WATCHDOG_USEC, and STOPPING=1 when a real SIGTERM arrives, after
// which it exits 0.
func TestSystemdNotifyCoordinator(t *testing.T) {
	notes := fakeSystemd(t)
	t.Setenv("WATCHDOG_USEC", "400000") // pings every ~200 ms
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runMain([]string{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml",
			"--listen", "127.0.0.1:0", "--state-dir", t.TempDir()}, &stdout, &stderr)
	}()
	ready, _ := next(t, notes, "READY=1")
	if !strings.Contains(ready.msg, "STATUS=0 nodes, 0 jobs running") {
		t.Errorf("READY came with %q, want the coordinator's status line", ready.msg)
	}
	if !strings.HasPrefix(stdout.String(), "coordinator http://") {
		t.Errorf("READY=1 before the coordinator printed its address: %q", stdout.String())
	}

	var pings []time.Time
	for len(pings) < 8 {
		n, _ := next(t, notes, "WATCHDOG=1")
		pings = append(pings, n.at)
	}
	mean := pings[len(pings)-1].Sub(pings[0]) / time.Duration(len(pings)-1)
	if mean < 100*time.Millisecond || mean > 350*time.Millisecond {
		t.Errorf("watchdog pings every %v on average, want about 200ms (half of WATCHDOG_USEC=400ms)", mean)
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next(t, notes, "STOPPING=1")
	select {
	case status := <-done:
		if status != exitOK {
			t.Errorf("exit status %d after SIGTERM, want 0; stderr:\n%s", status, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the coordinator did not stop after SIGTERM")
	}
}

// TestSystemdReadyWaitsForTheState: a node is not READY while it
// registers (its STATUS says so); READY=1 comes with the first state that
// is ready, once, and STATUS only when the line changes.
func TestSystemdReadyWaitsForTheState(t *testing.T) {
	notes := fakeSystemd(t)
	var mu sync.Mutex
	ready, status := false, "registering with http://c:7070"
	state := func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return ready, status
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	stop := startSystemd(ctx, log, state)
	defer stop()
	defer cancel()

	first, _ := next(t, notes, "STATUS=")
	if first.msg != "STATUS=registering with http://c:7070" {
		t.Fatalf("first notification %q, want the registering status alone", first.msg)
	}
	mu.Lock()
	ready, status = true, "registered as n1, 0 tasks"
	mu.Unlock()
	got, _ := next(t, notes, "READY=1")
	if got.msg != "READY=1\nSTATUS=registered as n1, 0 tasks" {
		t.Errorf("got %q", got.msg)
	}
	mu.Lock()
	status = "registered as n1, 2 tasks"
	mu.Unlock()
	got, before := next(t, notes, "STATUS=")
	if got.msg != "STATUS=registered as n1, 2 tasks" || len(before) != 0 {
		t.Errorf("got %q after %v: want the new status alone, READY not again", got.msg, before)
	}
	stop()
	next(t, notes, "STOPPING=1")
}

// TestNoNotifySocketNoGoroutine: outside systemd the supervisor starts
// nothing.
func TestNoNotifySocketNoGoroutine(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	called := false
	stop := startSystemd(context.Background(), slog.Default(), func() (bool, string) { called = true; return true, "" })
	stop()
	if called {
		t.Error("the state was read without NOTIFY_SOCKET")
	}
}

// TestSystemdNotifyNode: a node daemon is READY once registered, with its
// id and tasks in STATUS; its coordinator's STATUS counts it.
func TestSystemdNotifyNode(t *testing.T) {
	notes := fakeSystemd(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var coordOut, nodeOut, logs syncbuf.Buffer
	wg.Go(func() {
		run(ctx, []string{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml",
			"--listen", "127.0.0.1:0", "--heartbeat", "50ms", "--state-dir", t.TempDir()}, &coordOut, &logs)
	})
	url, ok := strings.CutPrefix(waitLine(t, &coordOut), "coordinator ")
	if !ok {
		t.Fatalf("coordinator printed %q", coordOut.String())
	}
	next(t, notes, "STATUS=0 nodes, 0 jobs running")
	path := filepath.Join(t.TempDir(), "node.toml")
	src := fmt.Sprintf("name = \"n0\"\ncoordinator = %q\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = \"cpu-1t\"\nunits = 1\nplain = true\n", url)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { run(ctx, []string{"--role=node", "--config", path}, &nodeOut, &logs) })
	ready, before := next(t, notes, "STATUS=registered as ")
	if ready.msg != "READY=1\nSTATUS=registered as n0~1, 0 tasks" {
		t.Errorf("the node's first status after registering: %q", ready.msg)
	}
	for _, n := range before {
		if strings.Contains(n.msg, "READY=1") && !strings.Contains(n.msg, "nodes") {
			t.Errorf("the node said %q before it registered", n.msg)
		}
		if n.msg == "STATUS=1 nodes, 0 jobs running" {
			return // the coordinator counted it first
		}
	}
	next(t, notes, "STATUS=1 nodes, 0 jobs running")
}
