package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// cpuThrottle caps the share of its CPU the node gives its work, to
// emulate a slower node (issue 11): through the daemon's own cgroup v2
// cpu.max when it may write it, else by a duty cycle in the stage workers'
// step loop. The share starts at the node file's cpu_share and changes
// when the coordinator hands the node a new one (a throttle).
//
// The duty cycle sleeps (1/share - 1) x the work of each step after it,
// so that work and sleep together take work/share. The work is the CPU
// time the daemon's process used during the step, per CPU of the replica
// (processCPU): its compute, the next batch read ahead while it computed,
// the parameter-server shards it serves — what a capped CPU would have
// slowed — and not the time it waited for partners and parameter servers,
// whose speed is not this node's (sleeping for it would slow a fast
// replica down for waiting on a slow one). Several daemons in one process
// (tests) share one process's CPU time, which overstates each one's. The
// sleep is added to the step's reported compute time, as a capped CPU
// would have made the compute itself slower.
type cpuThrottle struct {
	// sleep waits d or until ctx ends (then false); tests replace it.
	sleep func(ctx context.Context, d time.Duration) bool

	mu     sync.Mutex
	share  float64
	cgroup *cgroupCPU // nil: the duty cycle
}

// newCPUThrottle is a throttle at share 1 that caps through cg if not nil.
func newCPUThrottle(cg *cgroupCPU) *cpuThrottle {
	return &cpuThrottle{sleep: sleep, share: 1, cgroup: cg}
}

// state is the share and how it is enforced (api.CPUShareNone, ...).
func (t *cpuThrottle) state() (float64, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.share >= 1:
		return t.share, api.CPUShareNone
	case t.cgroup != nil:
		return t.share, api.CPUShareCgroup
	}
	return t.share, api.CPUShareDutyCycle
}

// set applies share. A share out of range is refused. If the cgroup cannot
// be written, the throttle falls back to the duty cycle for good, applies
// share that way and returns why.
func (t *cpuThrottle) set(share float64) error {
	if err := api.CheckCPUShare("cpu_share", share); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.share = share
	if t.cgroup == nil {
		return nil
	}
	if err := t.cgroup.set(share); err != nil {
		restoreErr := t.cgroup.restore()
		t.cgroup = nil
		return fmt.Errorf("falling back to the duty cycle: %w", errors.Join(err, restoreErr))
	}
	return nil
}

// close gives the cgroup back its cpu.max from before the daemon started.
func (t *cpuThrottle) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cgroup == nil {
		return nil
	}
	return t.cgroup.restore()
}

// afterCompute runs the duty cycle after a step whose compute took
// compute: it sleeps dutyCycleSleep of it when the duty cycle is on, and
// returns how long it slept, with false if ctx ended first.
func (t *cpuThrottle) afterCompute(ctx context.Context, compute time.Duration) (time.Duration, bool) {
	share, mode := t.state()
	if mode != api.CPUShareDutyCycle {
		return 0, true
	}
	d := dutyCycleSleep(share, compute)
	if d <= 0 {
		return 0, true
	}
	return d, t.sleep(ctx, d)
}

// dutyCycleSleep is the sleep after compute that makes the two together
// last compute/share: (1/share - 1) x compute.
func dutyCycleSleep(share float64, compute time.Duration) time.Duration {
	if !(share > 0 && share < 1) || compute <= 0 {
		return 0
	}
	return time.Duration((1/share - 1) * float64(compute))
}

// applyShare sets the node's CPU share and logs a change. A share the
// throttle refuses (one out of range) is logged and ignored.
func (a *Agent) applyShare(share float64) {
	old, oldMode := a.throttle.state()
	if err := a.throttle.set(share); err != nil {
		a.log.Warn("cpu share", "share", share, "err", err)
	}
	if now, mode := a.throttle.state(); now != old || mode != oldMode {
		a.logShare("cpu share changed", "was", old)
	}
}

// logShare logs the share, how it is enforced and, for the duty cycle,
// why the cgroup is not used.
func (a *Agent) logShare(msg string, args ...any) {
	share, mode := a.throttle.state()
	args = append(args, "share", share, "mode", mode)
	if mode == api.CPUShareDutyCycle && a.noCgroup != nil {
		args = append(args, "no_cgroup", a.noCgroup.Error())
	}
	a.log.Info(msg, args...)
}

// cgroupCPU is the cpu.max of the daemon's own cgroup v2, which the daemon
// may write and has to itself.
type cgroupCPU struct {
	path     string // the cpu.max file
	original string // its content when the daemon started
	period   int64  // µs
	cpus     int    // the CPUs the daemon uses at share 1
}

// Where the kernel says which cgroup a process is in, and where cgroup v2
// is mounted.
const (
	procSelfCgroup = "/proc/self/cgroup"
	cgroupV2Root   = "/sys/fs/cgroup"
)

// findCgroupCPU returns the cpu.max of process pid's cgroup v2 (listed in
// procCgroup, the hierarchy mounted at root) if the cgroup holds pid alone
// and the file can be written; else nil and why not. cpus is how many CPUs
// the daemon uses at share 1: share s sets a quota of s x cpus periods.
func findCgroupCPU(procCgroup, root string, pid, cpus int) (*cgroupCPU, error) {
	rel, err := cgroupV2Path(procCgroup)
	if err != nil {
		return nil, err
	}
	if rel == "/" {
		return nil, errors.New("the daemon is in the root cgroup, which has no cpu.max")
	}
	dir := filepath.Join(root, filepath.FromSlash(rel))
	if err := aloneIn(filepath.Join(dir, "cgroup.procs"), pid); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "cpu.max")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w (is the cpu controller enabled for it?)", rel, err)
	}
	original := strings.TrimSpace(string(raw))
	period, err := cpuMaxPeriod(original)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: the daemon may not write its cpu.max: %w", rel, err)
	}
	f.Close()
	return &cgroupCPU{path: path, original: original, period: period, cpus: max(cpus, 1)}, nil
}

// cgroupV2Path finds the process's cgroup v2 path in /proc/self/cgroup,
// refusing a machine whose cpu controller is on cgroup v1.
func cgroupV2Path(procCgroup string) (string, error) {
	raw, err := os.ReadFile(procCgroup)
	if err != nil {
		return "", fmt.Errorf("which cgroup: %w", err)
	}
	rel := ""
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			rel = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return "", fmt.Errorf("%s: the cpu controller is on cgroup v1 (hierarchy %s)", procCgroup, parts[0])
			}
		}
	}
	if rel == "" {
		return "", fmt.Errorf("%s: the daemon is not in a cgroup v2", procCgroup)
	}
	return rel, nil
}

// aloneIn checks that the cgroup.procs file lists pid alone: capping a
// cgroup shared with other processes would slow them down too.
func aloneIn(procs string, pid int) error {
	raw, err := os.ReadFile(procs)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	fields := strings.Fields(string(raw))
	for _, f := range fields {
		if f != strconv.Itoa(pid) {
			return fmt.Errorf("%s: the daemon shares its cgroup with %d other process(es)", procs, len(fields)-1)
		}
	}
	return nil
}

// cpuMaxPeriod parses cpu.max ("max 100000" or "50000 100000") for its
// period.
func cpuMaxPeriod(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, fmt.Errorf("cpu.max %q: want \"quota period\"", s)
	}
	period, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || period <= 0 {
		return 0, fmt.Errorf("cpu.max %q: bad period", s)
	}
	return period, nil
}

// minQuota is the kernel's smallest cpu.max quota, 1 ms.
const minQuota = 1000

// set writes a quota of share x cpus periods; share 1 restores the
// original.
func (c *cgroupCPU) set(share float64) error {
	if share >= 1 {
		return c.restore()
	}
	quota := max(int64(share*float64(c.period)*float64(c.cpus)), minQuota)
	return c.write(fmt.Sprintf("%d %d", quota, c.period))
}

func (c *cgroupCPU) restore() error { return c.write(c.original) }

func (c *cgroupCPU) write(v string) error {
	if err := os.WriteFile(c.path, []byte(v+"\n"), 0); err != nil {
		return fmt.Errorf("writing %q to %s: %w", v, c.path, err)
	}
	return nil
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
