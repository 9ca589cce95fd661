package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"

	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/node"
)

// statusPoll is how often the systemd supervisor looks at the daemon's
// state for READY=1 and STATUS= when the watchdog is off or slower.
const statusPoll = 250 * time.Millisecond

// daemonState is what the systemd supervisor reports: whether the daemon
// is ready (READY=1 is sent once, the first time it is) and a line for
// `systemctl status`.
type daemonState func() (ready bool, status string)

// startSystemd speaks sd_notify for a daemon that runs until ctx ends,
// when $NOTIFY_SOCKET is set (under a Type=notify unit); otherwise it does
// nothing. Its goroutine sends READY=1 once state says ready, STATUS= when
// the line changes, WATCHDOG=1 every half of $WATCHDOG_USEC, and
// STOPPING=1 when ctx ends (SIGTERM) or the returned stop is called.
// state is called from that loop, so a daemon stuck holding the lock state
// takes stops the watchdog pings and systemd restarts it. stop ends the
// goroutine and waits for it.
func startSystemd(ctx context.Context, log *slog.Logger, state daemonState) (stop func()) {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return func() {}
	}
	watchdog, err := sdnotify.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd: WATCHDOG_USEC", "err", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { superviseSystemd(ctx, log, state, watchdog/2) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// superviseSystemd is startSystemd's loop; ping is the watchdog period (0:
// no watchdog).
func superviseSystemd(ctx context.Context, log *slog.Logger, state daemonState, ping time.Duration) {
	notify := func(msg string) {
		if _, err := sdnotify.SdNotify(false, msg); err != nil {
			log.Warn("systemd: sd_notify", "msg", msg, "err", err)
		}
	}
	poll := time.NewTicker(statusPoll)
	defer poll.Stop()
	var pings <-chan time.Time
	if ping > 0 {
		t := time.NewTicker(ping)
		defer t.Stop()
		pings = t.C
	}
	ready, lastStatus := false, ""
	report := func() {
		nowReady, status := state()
		msg := ""
		if status != lastStatus {
			msg = "STATUS=" + status
			lastStatus = status
		}
		if nowReady && !ready {
			ready = true
			msg = "READY=1\n" + msg
		}
		if msg != "" {
			notify(msg)
		}
	}
	report()
	for {
		select {
		case <-ctx.Done():
			notify("STOPPING=1\nSTATUS=stopping")
			return
		case <-poll.C:
			report()
		case <-pings:
			report()
			notify("WATCHDOG=1")
		}
	}
}

// coordinatorState: ready once listening (the caller starts the
// supervisor after Listen), with live nodes and running jobs.
func coordinatorState(c *coord.Coordinator) daemonState {
	return func() (bool, string) {
		s := c.Summary()
		status := fmt.Sprintf("%d nodes, %d jobs running", s.AliveNodes, s.RunningJobs)
		if s.QueuedJobs > 0 {
			status += fmt.Sprintf(", %d queued", s.QueuedJobs)
		}
		return true, status
	}
}

// nodeState: ready once registered with the coordinator.
func nodeState(a *node.Agent, coordinator string) daemonState {
	return func() (bool, string) {
		s := a.Summary()
		if s.ID == "" {
			return false, "registering with " + coordinator
		}
		return true, fmt.Sprintf("registered as %s, %d tasks", s.ID, s.Tasks)
	}
}
