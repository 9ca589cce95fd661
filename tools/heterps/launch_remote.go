package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// Bounds of the remote calls.
const (
	remoteCallTimeout = time.Minute      // one file copy, kill or cleanup
	remoteStopWait    = 10 * time.Second // for daemons to exit after SIGTERM
	remoteKillWait    = 5 * time.Second  // and after SIGKILL
	teardownTimeout   = 2 * time.Minute
)

// remote runs shell command lines on the allocation's hosts through the
// remote shell: rsh's words, the host (in place of {host}, else after the
// words), then one argument, `sh -c 'LINE'`, so that the remote login
// shell, whatever it is, only has to run sh. dir is the launch's directory
// on every host.
type remote struct {
	rsh []string
	dir string
}

func (r remote) argv(host, line string) []string {
	out := make([]string, 0, len(r.rsh)+2)
	placed := false
	for _, w := range r.rsh {
		if strings.Contains(w, "{host}") {
			w, placed = strings.ReplaceAll(w, "{host}", host), true
		}
		out = append(out, w)
	}
	if !placed {
		out = append(out, host)
	}
	return append(out, "sh -c "+shellQuote(line))
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " ")
}

// run runs line on host with stdin, in a process group of its own (Ctrl-C
// is heterps' to handle), and returns an error carrying its output.
func (r remote) run(ctx context.Context, host, line string, stdin []byte) error {
	ctx, cancel := context.WithTimeout(ctx, remoteCallTimeout)
	defer cancel()
	argv := r.argv(host, line)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s on %s: %w: %s", argv[0], host, err, bytes.TrimSpace(out))
	}
	return nil
}

// put writes content to name in the launch's directory on host, over the
// remote shell's standard input (so that the secret is never on a command
// line), with umask 077: the directory is 0700 and the file 0600.
func (r remote) put(ctx context.Context, host, name string, content []byte) error {
	dst := path.Join(r.dir, name)
	tmp := shellQuote(dst+".tmp") + ".$$" // hosts that share the directory (NFS) copy side by side
	line := fmt.Sprintf("umask 077 && mkdir -p %s && cat > %s && mv -f %s %s", shellQuote(r.dir), tmp, tmp, shellQuote(dst))
	if err := r.run(ctx, host, line, content); err != nil {
		return fmt.Errorf("copy %s to %s: %w", name, host, err)
	}
	return nil
}

// daemonLine runs bin with args in the launch's directory, writing its
// process id to name.pid first (exec keeps the shell's), so that a later
// remote call can signal it: ending the local ssh or srun does not always
// end the remote process.
func (r remote) daemonLine(bin, name string, args []string) string {
	return fmt.Sprintf("cd %s && echo $$ > %s && exec %s", shellQuote(r.dir), shellQuote(name+".pid"), shellJoin(append([]string{bin}, args...)...))
}

// remoteFile is a file to copy to a host.
type remoteFile struct {
	name    string
	content []byte
}

// distribute copies files to their hosts, one host per goroutine.
func (r remote) distribute(ctx context.Context, files map[string][]remoteFile) error {
	var wg sync.WaitGroup
	errs := make([]error, 0, len(files))
	var mu sync.Mutex
	for host, fs := range files {
		wg.Go(func() {
			for _, f := range fs {
				if err := r.put(ctx, host, f.name, f.content); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// remoteDaemon is a daemon started on a host; child is the local remote
// shell that carries its standard output.
type remoteDaemon struct {
	host, name string
	child      *child
}

// launched is a launch under way: what it started, to tear it down.
type launched struct {
	remote
	bin     string
	logDir  string
	kids    children
	started []remoteDaemon // the coordinator first
	stderr  io.Writer
}

// start starts heterpsd with args on host and returns its first line.
func (l *launched) start(ctx context.Context, host, name string, args ...string) (string, error) {
	firstLine, err := l.spawn(host, name, args...)
	if err != nil {
		return "", err
	}
	return firstLine(ctx)
}

// spawn starts heterpsd with args on host and returns the wait for its
// first line.
func (l *launched) spawn(host, name string, args ...string) (func(context.Context) (string, error), error) {
	args = append(slices.Clip(args), "--stop-on-stdin-close") // the lifeline children.lifelines holds
	argv := l.argv(host, l.daemonLine(l.bin, name, args))
	n := len(l.kids.procs)
	firstLine, err := l.kids.spawn(argv[0], filepath.Join(l.logDir, name+".log"), argv[1:]...)
	if len(l.kids.procs) > n {
		l.started = append(l.started, remoteDaemon{host: host, name: name, child: l.kids.procs[n]})
	}
	return firstLine, err
}

// teardown stops the node daemons, then the coordinator, through the
// remote shell (SIGTERM, then SIGKILL for those still there after
// remoteStopWait), then the local remote shells, and removes the launch's
// directory (the secret with it) from every host.
func (l *launched) teardown(hosts []string) {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	if len(l.started) > 1 {
		l.stop(ctx, l.started[1:])
	}
	if len(l.started) > 0 {
		l.stop(ctx, l.started[:1])
	}
	l.kids.stop()
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() {
			if err := l.run(ctx, h, "rm -rf "+shellQuote(l.dir), nil); err != nil {
				fmt.Fprintf(l.stderr, "heterps launch: removing %s: %v\n", l.dir, err)
			}
		})
	}
	wg.Wait()
}

func (l *launched) stop(ctx context.Context, ds []remoteDaemon) {
	l.signal(ctx, ds, "TERM")
	left := waitExited(ds, remoteStopWait)
	if len(left) > 0 {
		l.signal(ctx, left, "KILL")
		waitExited(left, remoteKillWait)
	}
}

// signal sends sig to each daemon through the remote shell.
func (l *launched) signal(ctx context.Context, ds []remoteDaemon, sig string) {
	var wg sync.WaitGroup
	for _, d := range ds {
		select {
		case <-d.child.exited:
			continue // its remote shell has ended: so has the daemon
		default:
		}
		wg.Go(func() {
			pid := shellQuote(path.Join(l.dir, d.name+".pid"))
			// A daemon that exits meanwhile, or never wrote its pid, is no error.
			line := fmt.Sprintf("if test -f %s; then kill -%s $(cat %s) 2>/dev/null; fi; true", pid, sig, pid)
			if err := l.run(ctx, d.host, line, nil); err != nil {
				fmt.Fprintf(l.stderr, "heterps launch: SIG%s to %s on %s: %v\n", sig, d.name, d.host, err)
			}
		})
	}
	wg.Wait()
}

// waitExited waits up to d for the daemons' remote shells to end and
// returns those that have not.
func waitExited(ds []remoteDaemon, d time.Duration) []remoteDaemon {
	timer := time.NewTimer(d)
	defer timer.Stop()
	var left []remoteDaemon
	for _, rd := range ds {
		select {
		case <-rd.child.exited:
		case <-timer.C:
			left = append(left, rd)
			timer.Reset(0)
		}
	}
	return left
}

// run starts the coordinator and node daemons on the allocation, submits
// the job and follows it; everything it started is stopped and removed
// before it returns, whatever happens.
func (p *launchPlan) run(ctx context.Context, stderr io.Writer) (api.JobStatus, error) {
	var none api.JobStatus
	logDir, keep, err := logDirectory(p.f.logDir, "heterps-launch-")
	if err != nil {
		return none, err
	}
	secret, err := newSecret()
	if err != nil {
		return none, err
	}
	secretPath := filepath.Join(logDir, "secret")
	os.Remove(secretPath) // WriteFile keeps an existing file's mode
	if err := os.WriteFile(secretPath, secret, 0o600); err != nil {
		return none, err
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	l := &launched{remote: remote{rsh: strings.Fields(p.f.rsh), dir: path.Join(p.f.workdir, "heterps-launch-"+hex.EncodeToString(suffix))},
		bin: p.bin, logDir: logDir, kids: children{ownGroup: true, lifelines: true}, stderr: stderr}
	failed := true
	defer func() {
		l.teardown(p.hosts())
		os.Remove(secretPath)
		if !keep && !failed {
			os.RemoveAll(logDir)
		} else {
			fmt.Fprintf(stderr, "heterps launch: daemon logs in %s\n", logDir)
		}
	}()
	s, err := p.startAndRun(ctx, l, secret, stderr)
	failed = err != nil || s.State != api.JobDone
	return s, err
}

// hosts lists the hosts the launch uses, the coordinator's first.
func (p *launchPlan) hosts() []string {
	out := []string{p.coordHost}
	for _, d := range p.daemons {
		if !slices.Contains(out, d.host) {
			out = append(out, d.host)
		}
	}
	return out
}

func (p *launchPlan) startAndRun(ctx context.Context, l *launched, secret []byte, stderr io.Writer) (api.JobStatus, error) {
	var none api.JobStatus
	secretAt := path.Join(l.dir, "secret")
	files := map[string][]remoteFile{}
	for _, h := range p.hosts() {
		files[h] = []remoteFile{{"secret", secret}}
	}
	files[p.coordHost] = append(files[p.coordHost], remoteFile{"catalog.toml", p.catalog})
	fmt.Fprintf(stderr, "heterps launch: %d host(s), %d node daemon(s); files in %s on each host\n", len(p.hosts()), len(p.daemons), l.dir)
	if err := l.distribute(ctx, files); err != nil {
		return none, err
	}
	line, err := l.start(ctx, p.coordHost, "coordinator", "--role=coordinator", "--catalog", path.Join(l.dir, "catalog.toml"),
		"--listen", hostPort(p.coordHost, p.f.basePort), "--state-dir", path.Join(l.dir, "state"),
		"--secret-file", secretAt, "--heartbeat", p.f.heartbeat.String())
	if err != nil {
		return none, err
	}
	url, err := coordinatorURL(line, p.coordHost)
	if err != nil {
		return none, err
	}
	nodeFiles := map[string][]remoteFile{}
	for _, d := range p.daemons {
		nodeFiles[d.host] = append(nodeFiles[d.host], remoteFile{d.offer.name + ".toml", launchNodeFile(d, url, secretAt, p.f.heartbeat)})
	}
	if err := l.distribute(ctx, nodeFiles); err != nil {
		return none, err
	}
	// Every node daemon's remote shell is started before any is waited
	// for: the hosts bring their daemons up side by side.
	waits := make([]func(context.Context) (string, error), len(p.daemons))
	for i, d := range p.daemons {
		if waits[i], err = l.spawn(d.host, d.offer.name, "--role=node", "--config", path.Join(l.dir, d.offer.name+".toml")); err != nil {
			return none, err
		}
	}
	if err := awaitFirstLines(ctx, waits); err != nil {
		return none, err
	}
	c := newCoordClient(url)
	defer c.close()
	c.Key = api.ControlKey(bytes.TrimSpace(secret))
	c.stopCheckpoint = p.f.stopCheckpoint
	return runJob(ctx, c, &l.kids, len(p.daemons), p.job, stderr, "heterps launch", url, nil) // a remote coordinator is not restarted
}

// coordinatorURL turns the coordinator's first line, "coordinator
// http://ADDR:PORT", into its URL on host: the address it is bound to may
// be one other machines cannot use, such as 127.0.1.1.
func coordinatorURL(line, host string) (string, error) {
	addr, ok := strings.CutPrefix(line, "coordinator http://")
	_, port, err := net.SplitHostPort(addr)
	if _, perr := strconv.Atoi(port); !ok || err != nil || perr != nil {
		return "", fmt.Errorf("the coordinator said %q, want \"coordinator http://HOST:PORT\"", line)
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
