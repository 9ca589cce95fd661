package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/config/hosts"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/syncbuf"
)

// fakeSSH is a remote shell for tests, called as ssh and oarsh are (HOST
// LINE): it runs the line on this machine in a session of its own, so that
// ending the script does not end the command, as ending ssh does not end
// the remote process. It logs the host to $RSH_LOG.
const fakeSSH = `#!/bin/sh
host=$1
shift
echo "$host" >> "$RSH_LOG"
exec 3<&0
setsid sh -c "$1" <&3 3<&- &
exec 3<&-
wait $!
`

// fakeSrun is called as srun is (options, -w HOST, then a command and
// its arguments, run without a shell).
const fakeSrun = `#!/bin/sh
host=
while [ $# -gt 0 ]; do
	case $1 in
	-w) host=$2; shift 2; break ;;
	--*) shift ;;
	*) echo "fake srun: unexpected $1" >&2; exit 2 ;;
	esac
done
echo "$host" >> "$RSH_LOG"
exec 3<&0
setsid "$@" <&3 3<&- &
exec 3<&-
wait $!
`

// launchFixture is what the launch tests share: heterpsd built once, the
// remote shells, the tiny two-stage job and a catalog whose [[node]]s are
// named like the loopback "hosts" 127.0.0.1 (cpu) and 127.0.0.2 (gpu).
type launchFixture struct {
	bin, ssh, srun, job, catalog, rshLog string
}

func newLaunchFixture(t *testing.T) *launchFixture {
	t.Helper()
	dir := t.TempDir()
	fx := &launchFixture{bin: filepath.Join(dir, "heterpsd"), ssh: filepath.Join(dir, "fake-ssh"), srun: filepath.Join(dir, "fake-srun"),
		job: filepath.Join(dir, "job.toml"), catalog: filepath.Join(dir, "catalog.toml"), rshLog: filepath.Join(dir, "rsh.log")}
	if out, err := exec.Command("go", "build", "-o", fx.bin, "../../daemon/cmd/heterpsd").CombinedOutput(); err != nil {
		t.Fatalf("build heterpsd: %v\n%s", err, out)
	}
	writeFile(t, fx.ssh, fakeSSH, 0o755)
	writeFile(t, fx.srun, fakeSrun, 0o755)
	job, err := os.ReadFile("../../daemon/node/testdata/job.toml")
	if err != nil {
		t.Fatal(err)
	}
	model, err := filepath.Abs("../../daemon/node/testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, fx.job, strings.Replace(string(job), `"testdata/tiny.toml"`, `"`+model+`"`, 1), 0o600)
	cat, err := os.ReadFile("../../daemon/node/testdata/catalog.toml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, fx.catalog, string(cat)+`
[[node]]
name = "127.0.0.1"
address = "127.0.0.1:7071"
units = { cpu = 1 }

[[node]]
name = "127.0.0.2"
address = "127.0.0.2:7071"
units = { gpu = 1 }
`, 0o600)
	t.Setenv("RSH_LOG", fx.rshLog)
	return fx
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// launchedProcesses lists the processes whose command line mentions dir.
func launchedProcesses(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc: cannot look for leftover daemons")
	}
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			out = append(out, e.Name()+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// checkTornDown: no daemon runs any more, the hosts' launch directories
// (and the secret in them) are gone, and so is the local copy of the
// secret.
func checkTornDown(t *testing.T, workdir, logDir string) {
	t.Helper()
	if left := launchedProcesses(t, workdir); len(left) > 0 {
		t.Errorf("processes left running:\n%s", strings.Join(left, "\n"))
	}
	if left, _ := filepath.Glob(filepath.Join(workdir, "heterps-launch-*")); len(left) > 0 {
		t.Errorf("launch directories left on the hosts: %v", left)
	}
	if _, err := os.Stat(filepath.Join(logDir, "secret")); !os.IsNotExist(err) {
		t.Errorf("the local secret is still there (%v)", err)
	}
}

// TestLaunch runs the real launch path for each allocation source: the
// remote shells start the daemons on this machine, on the loopback
// "hosts" 127.0.0.1 and 127.0.0.2, and the tiny job runs to the end.
func TestLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds heterpsd and runs daemons")
	}
	fx := newLaunchFixture(t)
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"oar", func(t *testing.T) []string {
			nodefile := filepath.Join(t.TempDir(), "nodefile")
			writeFile(t, nodefile, "127.0.0.1\n127.0.0.1\n127.0.0.2\n", 0o600)
			t.Setenv("OAR_NODEFILE", nodefile)
			return []string{"--oar", "--rsh", fx.ssh, "--base-port", "0"}
		}},
		{"slurm", func(t *testing.T) []string {
			t.Setenv("SLURM_JOB_NODELIST", "127.0.0.[1-2]")
			t.Setenv("SLURM_JOB_CPUS_PER_NODE", "")
			t.Setenv("SLURM_TASKS_PER_NODE", "1(x2)")
			return []string{"--slurm", "--rsh", fx.srun + " --nodes=1 --ntasks=1 --overlap -w {host} sh -c", "--base-port", "0"}
		}},
		{"hostfile", func(t *testing.T) []string {
			hostfile := filepath.Join(t.TempDir(), "hosts")
			writeFile(t, hostfile, "# two loopback hosts\n127.0.0.1 slots=1 type=cpu\n\n127.0.0.2 slots=1 type=gpu  # the second stage\n", 0o600)
			return []string{"--hostfile", hostfile, "--rsh", fx.ssh, "--base-port", freeBasePort(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(fx.rshLog)
			workdir, logDir := t.TempDir(), t.TempDir()
			args := append([]string{fx.job, "--catalog", fx.catalog, "--heterpsd", fx.bin, "--workdir", workdir, "--log-dir", logDir,
				"--heartbeat", "200ms", "--timeout", "2m", "--json"}, tc.args(t)...)
			var stdout, stderr bytes.Buffer
			code := runLaunch(context.Background(), args, &stdout, &stderr)
			if code != exitOK {
				t.Fatalf("exit %d\nstdout %s\nstderr %s\nlogs: %s", code, stdout.String(), stderr.String(), readLogs(logDir))
			}
			var r runResult
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
				t.Fatalf("%v\n%s", err, stdout.String())
			}
			if r.State != api.JobDone || r.Steps != 20 || len(r.Stages) != 2 {
				t.Errorf("result %+v", r)
			}
			for _, name := range []string{"coordinator.log", "127.0.0.1.cpu.log", "127.0.0.2.gpu.log"} {
				if _, err := os.Stat(filepath.Join(logDir, name)); err != nil {
					t.Errorf("log %s: %v", name, err)
				}
			}
			log, _ := os.ReadFile(fx.rshLog)
			for _, h := range []string{"127.0.0.1", "127.0.0.2"} {
				if !strings.Contains(string(log), h+"\n") {
					t.Errorf("the remote shell never reached %s: %q", h, log)
				}
			}
			checkTornDown(t, workdir, logDir)
		})
	}
	t.Run("interrupted", func(t *testing.T) { testLaunchInterrupted(t, fx) })
	t.Run("killed", func(t *testing.T) { testLaunchKilled(t, fx) })
}

// testLaunchKilled: a launch killed outright (SIGKILL), which cannot stop
// its daemons through the remote shell, leaves none running: each reads
// the end of the standard input its remote shell passed on, once the
// shell and launch's end of the pipe are gone, and stops.
func testLaunchKilled(t *testing.T, fx *launchFixture) {
	long := filepath.Join(t.TempDir(), "long.toml")
	src, err := os.ReadFile(fx.job)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, long, strings.Replace(string(src), "steps = 20", "steps = 1000000", 1), 0o600)
	hostfile := filepath.Join(t.TempDir(), "hosts")
	writeFile(t, hostfile, "127.0.0.1 type=cpu\n127.0.0.2 type=gpu\n", 0o600)
	workdir, logDir := t.TempDir(), t.TempDir()
	launch := exec.Command(os.Args[0], "launch", long, "--hostfile", hostfile, "--rsh", fx.ssh, "--base-port", "0", "--catalog", fx.catalog,
		"--heterpsd", fx.bin, "--workdir", workdir, "--log-dir", logDir, "--heartbeat", "200ms")
	launch.Env = append(os.Environ(), asHeterpsEnv+"=1")
	if err := launch.Start(); err != nil {
		t.Fatal(err)
	}
	daemons := func() []string {
		var out []string
		for _, p := range launchedProcesses(t, workdir) {
			if _, cmdline, _ := strings.Cut(p, ": "); strings.HasPrefix(cmdline, fx.bin+" ") {
				out = append(out, p)
			}
		}
		return out
	}
	for deadline := time.Now().Add(60 * time.Second); len(daemons()) < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			launch.Process.Kill()
			t.Fatalf("%d of 3 daemons up within 60 s; logs: %s", len(daemons()), readLogs(logDir))
		}
	}
	time.Sleep(time.Second) // the job trains
	launch.Process.Kill()
	launch.Wait()
	for deadline := time.Now().Add(20 * time.Second); len(daemons()) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("daemons left running 20 s after launch was killed:\n%s", strings.Join(daemons(), "\n"))
		}
	}
}

// barrierSSH is fakeSSH that holds each node daemon's start until
// $BARRIER_N of them have been asked for (at most 20 s; then it goes on
// and notes the wait in $BARRIER_LATE): daemons started one after another,
// each waited for before the next, never meet.
const barrierSSH = `#!/bin/sh
case $2 in
*--role=node*)
	echo x >> "$BARRIER_LOG"
	i=0
	while [ "$(wc -l < "$BARRIER_LOG")" -lt "$BARRIER_N" ]; do
		i=$((i+1))
		if [ $i -gt 400 ]; then echo "$1" >> "$BARRIER_LATE"; break; fi
		sleep 0.05
	done ;;
esac
exec "$FAKE_SSH" "$@"
`

// TestLaunchStartsNodeDaemonsSideBySide: every node daemon's remote shell
// is started before launch waits for any daemon to come up, so that a
// large allocation comes up in the time of its slowest host.
func TestLaunchStartsNodeDaemonsSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("builds heterpsd and runs daemons")
	}
	fx := newLaunchFixture(t)
	dir := t.TempDir()
	rsh := filepath.Join(dir, "barrier-ssh")
	writeFile(t, rsh, barrierSSH, 0o755)
	late := filepath.Join(dir, "late")
	t.Setenv("FAKE_SSH", fx.ssh)
	t.Setenv("BARRIER_LOG", filepath.Join(dir, "starts"))
	t.Setenv("BARRIER_N", "2")
	t.Setenv("BARRIER_LATE", late)
	hostfile := filepath.Join(dir, "hosts")
	writeFile(t, hostfile, "127.0.0.1 type=cpu\n127.0.0.2 type=gpu\n", 0o600)
	workdir, logDir := t.TempDir(), t.TempDir()
	var stdout, stderr bytes.Buffer
	code := runLaunch(context.Background(), []string{fx.job, "--hostfile", hostfile, "--rsh", rsh, "--base-port", "0", "--catalog", fx.catalog,
		"--heterpsd", fx.bin, "--workdir", workdir, "--log-dir", logDir, "--heartbeat", "200ms", "--timeout", "2m"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d\nstderr %s\nlogs: %s", code, stderr.String(), readLogs(logDir))
	}
	if waited, err := os.ReadFile(late); err == nil {
		t.Errorf("node daemons on %q waited 20 s for the others to be started: started one after another", waited)
	}
	checkTornDown(t, workdir, logDir)
}

// testLaunchInterrupted: Ctrl-C (the context ending) while the job runs
// stops every daemon through the remote shell and cleans the hosts.
func testLaunchInterrupted(t *testing.T, fx *launchFixture) {
	long := filepath.Join(t.TempDir(), "long.toml")
	src, err := os.ReadFile(fx.job)
	if err != nil {
		t.Fatal(err)
	}
	ckptDir := t.TempDir()
	writeFile(t, long, strings.Replace(string(src), "steps = 20", "steps = 1000000", 1)+fmt.Sprintf("[checkpoint]\ndir = %q\nevery = 5\n", ckptDir), 0o600)
	hostfile := filepath.Join(t.TempDir(), "hosts")
	writeFile(t, hostfile, "127.0.0.1 type=cpu\n127.0.0.2 type=gpu\n", 0o600)
	workdir, logDir := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runLaunch(ctx, []string{long, "--hostfile", hostfile, "--rsh", fx.ssh, "--base-port", "0", "--catalog", fx.catalog,
			"--heterpsd", fx.bin, "--workdir", workdir, "--log-dir", logDir, "--heartbeat", "200ms"}, &bytes.Buffer{}, &stderr)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for written, _ := filepath.Glob(filepath.Join(ckptDir, "step-*", "manifest.json")); len(written) == 0; written, _ = filepath.Glob(filepath.Join(ckptDir, "step-*", "manifest.json")) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the job wrote no checkpoint in 60 s: %s\nlogs: %s", stderr.String(), readLogs(logDir))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // five heartbeats: the coordinator has the checkpoint's reports
	remoteSecrets, _ := filepath.Glob(filepath.Join(workdir, "heterps-launch-*", "secret"))
	for _, secret := range append(remoteSecrets, filepath.Join(logDir, "secret")) {
		if info, err := os.Stat(secret); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("secret %s: %v, want mode 0600", secret, err)
		}
	}
	if len(remoteSecrets) != 1 {
		t.Errorf("secrets on the hosts: %v, want one (both loopback hosts share the directory)", remoteSecrets)
	}
	daemons := 0
	for _, p := range launchedProcesses(t, workdir) {
		if _, cmdline, _ := strings.Cut(p, ": "); strings.HasPrefix(cmdline, fx.bin+" ") {
			daemons++
		}
	}
	if daemons != 3 {
		t.Errorf("%d heterpsd running, want the coordinator and two node daemons: %v", daemons, launchedProcesses(t, workdir))
	}
	cancel()
	select {
	case code := <-done:
		if code != exitFailure || !strings.Contains(stderr.String(), "context canceled: job j1: cancelled at step") ||
			!strings.Contains(stderr.String(), "latest checkpoint: step ") || !strings.Contains(stderr.String(), ckptDir) {
			t.Errorf("exit %d, stderr %s; want the cancelled job's step and the checkpoint to resume from", code, stderr.String())
		}
		var asked, written, latest int64
		_, after, _ := strings.Cut(stderr.String(), "writing a checkpoint of job j1 at step ")
		_, werr := fmt.Sscanf(after, "%d", &asked)
		_, after, _ = strings.Cut(stderr.String(), "heterps: checkpoint of step ")
		fmt.Sscanf(after, "%d", &written)
		_, after, _ = strings.Cut(stderr.String(), "latest checkpoint: step ")
		fmt.Sscanf(after, "%d", &latest)
		if werr != nil || written < asked || latest < written {
			t.Errorf("asked for step %d, written %d, latest %d (stderr %s); want a checkpoint asked for and written before the job was cancelled\nlogs: %s", asked, written, latest, stderr.String(), readLogs(logDir))
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("launch did not return after its context ended: %s\nlogs: %s", stderr.String(), readLogs(logDir))
	}
	checkTornDown(t, workdir, logDir)
}

func readLogs(dir string) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		src, _ := os.ReadFile(l)
		b.WriteString("\n== " + l + "\n" + string(src))
	}
	return b.String()
}

// freeBasePort finds a port p such that p..p+4 look free.
func freeBasePort(t *testing.T) string {
	t.Helper()
	for p := 20000 + os.Getpid()%20000; p < 60000; p += 7 {
		free := true
		for q := p; q < p+5 && free; q++ {
			free = portFree(q)
		}
		if free {
			return strconv.Itoa(p)
		}
	}
	t.Fatal("no free ports")
	return ""
}

func portFree(port int) bool {
	for _, host := range []string{"127.0.0.1", "127.0.0.2"} {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// TestRemotePutIsPrivate: a file copied to a host over the remote shell's
// standard input lands with mode 0600 in a 0700 directory.
func TestRemotePutIsPrivate(t *testing.T) {
	dir := t.TempDir()
	ssh := filepath.Join(dir, "fake-ssh")
	writeFile(t, ssh, fakeSSH, 0o755)
	t.Setenv("RSH_LOG", filepath.Join(dir, "rsh.log"))
	r := remote{rsh: []string{ssh}, dir: filepath.Join(dir, "heterps-launch-x")}
	if err := r.put(context.Background(), "127.0.0.1", "secret", []byte("it's a secret\n")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(r.dir, "secret"))
	if err != nil || string(got) != "it's a secret\n" {
		t.Fatalf("%q %v", got, err)
	}
	for path, want := range map[string]os.FileMode{r.dir: 0o700, filepath.Join(r.dir, "secret"): 0o600} {
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", path, info.Mode().Perm(), err, want)
		}
	}
}

func TestRemoteArgv(t *testing.T) {
	for _, tc := range []struct {
		rsh  string
		want string
	}{
		{"ssh", `ssh h1 sh -c 'cd /tmp/x && echo $$ > a.pid && exec /usr/bin/heterpsd --config '\''/tmp/x/a b.toml'\'''`},
		{"srun --nodes=1 -w {host} sh -c", `srun --nodes=1 -w h1 sh -c sh -c 'cd /tmp/x && echo $$ > a.pid && exec /usr/bin/heterpsd --config '\''/tmp/x/a b.toml'\'''`},
	} {
		r := remote{rsh: strings.Fields(tc.rsh), dir: "/tmp/x"}
		got := strings.Join(r.argv("h1", r.daemonLine("/usr/bin/heterpsd", "a", []string{"--config", "/tmp/x/a b.toml"})), " ")
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.rsh, got, tc.want)
		}
	}
}

func TestLaunchOffers(t *testing.T) {
	cat, err := config.LoadCatalog("../../config/examples/catalogs/grid5000.toml")
	if err != nil {
		t.Fatal(err)
	}
	hs := []hosts.Host{{Name: "dahu-1.grenoble.grid5000.fr", Slots: 32}, {Name: "gemini-1.lyon.grid5000.fr", Slots: 40},
		{Name: "gros-77.nancy.grid5000.fr", Slots: 18}, {Name: "x", Slots: 4, Type: "t4", Line: 3}}
	got, err := launchOffers(hs, cat, "")
	if err != nil {
		t.Fatal(err)
	}
	// A GPU host gets a daemon per GPU, numbered from 0 on each host.
	want := []hostOffer{{host: "dahu-1.grenoble.grid5000.fr", offer: offer{name: "dahu-1.xeon-gold-6130", typ: "xeon-gold-6130", units: 32, threads: 1}}}
	for g := range 8 {
		want = append(want, hostOffer{host: "gemini-1.lyon.grid5000.fr", offer: offer{name: fmt.Sprintf("gemini-1.v100.gpu%d", g), typ: "v100", units: 1, threads: 1, gpus: true, gpu: g}})
	}
	want = append(want, hostOffer{host: "gros-77.nancy.grid5000.fr", offer: offer{name: "gros-77.xeon-gold-5220", typ: "xeon-gold-5220", units: 18, threads: 1}})
	for g := range 4 {
		want = append(want, hostOffer{host: "x", offer: offer{name: fmt.Sprintf("x.t4.gpu%d", g), typ: "t4", units: 1, threads: 1, gpus: true, gpu: g}})
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, tc := range []struct {
		h      hosts.Host
		forced string
		want   string
	}{
		{hosts.Host{Name: "n1", Slots: 12}, "", "host n1: 12 cores do not tell which of the catalog's CPU types xeon-gold-6130, xeon-gold-5220 it offers"},
		{hosts.Host{Name: "n1", Slots: 12, Type: "h100", Line: 7}, "", `host n1 (line 7): type "h100" is not in the catalog`},
		{hosts.Host{Name: "n1", Slots: 12}, "k80", `host n1: type "k80" is not in the catalog`},
	} {
		if _, err := launchOffers([]hosts.Host{tc.h}, cat, tc.forced); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %s", tc.h, err, tc.want)
		}
	}
	forced, err := launchOffers([]hosts.Host{{Name: "a", Slots: 4}, {Name: "a2", Slots: 4}}, cat, "xeon-gold-5220")
	if err != nil || len(forced) != 2 || forced[1].offer.units != 4 || forced[1].offer.name != "a2.xeon-gold-5220" {
		t.Errorf("--type: %+v %v", forced, err)
	}
}

func TestLaunchFlagsAndPorts(t *testing.T) {
	for _, args := range [][]string{{"job.toml"}, {"job.toml", "--oar", "--slurm"}, {"--oar"}, {"job.toml", "--oar", "--rsh", " "},
		{"job.toml", "--oar", "--base-port", "70000"}} {
		if _, err := parseLaunchFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	f, err := parseLaunchFlags([]string{"job.toml", "--slurm"}, &bytes.Buffer{})
	if err != nil || f.rsh != "srun --nodes=1 --ntasks=1 --overlap -w {host} sh -c" || f.source != "slurm" {
		t.Errorf("%+v %v", f, err)
	}
	ds := make([]hostOffer, 3)
	if err := assignPorts(ds, 7070); err != nil || ds[0].port != 7071 || ds[0].psPort != 7072 || ds[2].port != 7075 || ds[2].psPort != 7076 {
		t.Errorf("ports %+v %v", ds, err)
	}
	if err := assignPorts(make([]hostOffer, 10), 65530); err == nil {
		t.Error("ports past 65535 accepted")
	}
	if u, err := coordinatorURL("coordinator http://127.0.1.1:7070", "node-1"); err != nil || u != "http://node-1:7070" {
		t.Errorf("%s %v", u, err)
	}
	if _, err := coordinatorURL("node x", "h"); err == nil {
		t.Error("a node's line taken for the coordinator's")
	}
}

// TestLaunchedGPUNodesNameTheirGPUs: a launched daemon of a GPU type names
// its GPUs in its node file (else it would be refused at registration); a
// CPU type's names none. Both files parse.
func TestLaunchedGPUNodesNameTheirGPUs(t *testing.T) {
	for _, tc := range []struct {
		o    offer
		want []int
	}{
		{offer{name: "gemini-1.v100", typ: "v100", units: 3, threads: 1, gpus: true}, []int{0, 1, 2}},
		{offer{name: "gemini-1.v100.gpu5", typ: "v100", units: 1, threads: 1, gpus: true, gpu: 5}, []int{5}},
		{offer{name: "dahu-1.xeon-gold-6130", typ: "xeon-gold-6130", units: 32, threads: 1}, nil},
	} {
		file := launchNodeFile(hostOffer{host: "h", offer: tc.o, port: 7100, psPort: 7101}, "http://head:7000", "/etc/heterps/secret", time.Second)
		n, err := config.ParseNode(tc.o.name+".toml", file)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.o.name, err, file)
		}
		if n.Lease.Duration != config.DefaultLease {
			t.Errorf("%s: lease %v with 1 s heartbeats, want the default %v", tc.o.name, n.Lease.Duration, config.DefaultLease)
		}
		if !slices.Equal(n.GPUs, tc.want) {
			t.Errorf("%s: gpus %v, want %v", tc.o.name, n.GPUs, tc.want)
		}
	}
}

// TestALaunchedNodesLeaseOutlastsItsHeartbeats: with heartbeats longer
// than a third of the default lease, the launched nodes' lease grows to
// three of them, which the coordinator accepts.
func TestALaunchedNodesLeaseOutlastsItsHeartbeats(t *testing.T) {
	file := launchNodeFile(hostOffer{host: "h", offer: offer{name: "h.cpu", typ: "cpu", units: 1, threads: 1}, port: 7100, psPort: 7101},
		"http://head:7000", "/etc/heterps/secret", 6*time.Second)
	n, err := config.ParseNode("h.cpu.toml", file)
	if err != nil || n.Lease.Duration != 18*time.Second {
		t.Fatalf("lease %v (%v) with 6 s heartbeats, want 18s\n%s", n.Lease.Duration, err, file)
	}
}
