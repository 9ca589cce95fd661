package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/internal/syncbuf"
)

// waitLine waits for the daemon's first output line.
func waitLine(t *testing.T, out *syncbuf.Buffer) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if line, _, ok := strings.Cut(out.String(), "\n"); ok {
			return line
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the daemon printed nothing")
	return ""
}

func TestBadNodeConfigNamesTheLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.toml")
	src := "name = \"n\"\ncoordinator = \"http://127.0.0.1:1\"\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = \"cpu\"\nunits = -1\nplain = true\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	status := run(context.Background(), []string{"--role=node", "--config", path}, &bytes.Buffer{}, &stderr)
	if status != exitUsage || !strings.Contains(stderr.String(), path+":6:") || !strings.Contains(stderr.String(), "units") {
		t.Errorf("status %d, stderr %q; want %d and the file's line 6", status, stderr.String(), exitUsage)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"--role=boss"}, {"--role=node"}, {"--role=coordinator"}, {"--role=node", "--config", "x", "extra"},
		{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml", "--listen", "0.0.0.0:0"},
		{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml", "--listen", ":0"},
		{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml", "--alloc-policy", "greedy"},
		{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml", "--alloc-epoch", "0s"}} {
		var stderr bytes.Buffer
		if status := run(context.Background(), args, &bytes.Buffer{}, &stderr); status != exitUsage {
			t.Errorf("%q: status %d (%s), want %d", args, status, stderr.String(), exitUsage)
		}
	}
}

// TestCoordinatorAndNode runs both roles until cancelled: the node
// registers with the coordinator, and both exit 0.
func TestCoordinatorAndNode(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	var coordOut, nodeOut, logs syncbuf.Buffer
	wg.Go(func() {
		statuses[0] = run(ctx, []string{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml",
			"--listen", "127.0.0.1:0", "--heartbeat", "50ms", "--state-dir", t.TempDir()}, &coordOut, &logs)
	})
	url, ok := strings.CutPrefix(waitLine(t, &coordOut), "coordinator ")
	if !ok {
		t.Fatalf("coordinator printed %q", coordOut.String())
	}
	path := filepath.Join(t.TempDir(), "node.toml")
	src := fmt.Sprintf("name = \"n0\"\ncoordinator = %q\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = \"cpu-1t\"\nunits = 1\nplain = true\n", url)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { statuses[1] = run(ctx, []string{"--role=node", "--config", path}, &nodeOut, &logs) })
	if line := waitLine(t, &nodeOut); !strings.HasPrefix(line, "node n0 data 127.0.0.1:") {
		t.Errorf("node printed %q", line)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var nodes []api.NodeStatus
		if resp, err := client.Get(url + "/v1/nodes"); err == nil {
			json.NewDecoder(resp.Body).Decode(&nodes)
			resp.Body.Close()
		}
		if len(nodes) == 1 && nodes[0].Name == "n0" && nodes[0].State == api.NodeAlive && nodes[0].PSAddr != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %+v; logs:\n%s", nodes, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if statuses[0] != exitOK || statuses[1] != exitOK {
		t.Errorf("exit statuses %v, want 0 0; logs:\n%s", statuses, logs.String())
	}
}

// TestCoordinatorNeedsASecretOffLoopback: a coordinator on all interfaces
// refuses to start without --secret-file, saying why.
func TestCoordinatorNeedsASecretOffLoopback(t *testing.T) {
	var stderr bytes.Buffer
	status := run(context.Background(), []string{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml",
		"--listen", "0.0.0.0:0"}, &bytes.Buffer{}, &stderr)
	if status != exitUsage || !strings.Contains(stderr.String(), "--secret-file") {
		t.Errorf("status %d, stderr %q", status, stderr.String())
	}
}

// TestSignedControlPlane: with --secret-file alone the coordinator serves
// a node that holds the same secret, and refuses an unsigned request.
func TestSignedControlPlane(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	secretPath := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretPath, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var coordOut, nodeOut, logs syncbuf.Buffer
	wg.Go(func() {
		run(ctx, []string{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml",
			"--listen", "127.0.0.1:0", "--heartbeat", "50ms", "--state-dir", dir, "--secret-file", secretPath}, &coordOut, &logs)
	})
	url, ok := strings.CutPrefix(waitLine(t, &coordOut), "coordinator ")
	if !ok {
		t.Fatalf("coordinator printed %q", coordOut.String())
	}
	path := filepath.Join(dir, "node.toml")
	src := fmt.Sprintf("name = \"n0\"\ncoordinator = %q\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = \"cpu-1t\"\nunits = 1\nsecret_file = %q\n", url, secretPath)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { run(ctx, []string{"--role=node", "--config", path}, &nodeOut, &logs) })
	waitLine(t, &nodeOut)

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url + "/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned GET /v1/nodes: %s, want 401", resp.Status)
	}
	key := api.ControlKey([]byte("0123456789abcdef0123456789abcdef"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/nodes", nil)
		api.Sign(req, nil, key, time.Now())
		var nodes []api.NodeStatus
		if resp, err := client.Do(req); err == nil {
			json.NewDecoder(resp.Body).Decode(&nodes)
			resp.Body.Close()
		}
		if len(nodes) == 1 && nodes[0].State == api.NodeAlive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the signed node did not register; logs:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStopIsBoundedAfterTheSignal: a daemon whose clean stop hangs exits
// with status 1 once the grace has passed after its context ended; one
// that stops in time keeps its own status.
func TestStopIsBoundedAfterTheSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	unnotified := false
	release := make(chan struct{})
	defer close(release)
	var stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runBounded(ctx, func() { unnotified = true }, 50*time.Millisecond, &stderr, func(context.Context) int {
			<-release // ignores its context, as a hung shutdown would
			return exitOK
		})
	}()
	cancel()
	select {
	case status := <-done:
		if status != exitFailure || !unnotified || !strings.Contains(stderr.String(), "still stopping") {
			t.Fatalf("status %d, signals restored %t, stderr %q", status, unnotified, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runBounded waits for a hung stop")
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	status := runBounded(ctx, func() {}, time.Minute, &stderr, func(ctx context.Context) int {
		<-ctx.Done()
		return exitOK
	})
	if status != exitOK {
		t.Fatalf("a clean stop gave status %d", status)
	}
}

// TestOneSecretFlag: --api-secret-file is an alias of --secret-file (the
// data plane is then authenticated too, where it used to stay plain), and
// two different secrets are refused.
func TestOneSecretFlag(t *testing.T) {
	var stderr bytes.Buffer
	f, err := parseFlags([]string{"--role=coordinator", "--catalog", "c.toml", "--api-secret-file", "/etc/heterps/secret"}, &stderr)
	if err != nil || f.secretFile != "/etc/heterps/secret" || !strings.Contains(stderr.String(), "deprecated") {
		t.Fatalf("alias: %v, secret file %q, stderr %q", err, f.secretFile, stderr.String())
	}
	_, err = parseFlags([]string{"--role=coordinator", "--catalog", "c.toml", "--secret-file", "/a", "--api-secret-file", "/b"}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "differ") {
		t.Fatalf("two secrets: %v", err)
	}
}

// A node keeps 64 MiB of slack for the collector when its threads cover
// the machine's CPUs and none when it shares them, unless
// --gc-headroom-mib says otherwise or the operator set GOGC; a negative or
// absurd headroom is refused naming the flag.
func TestGCHeadroomFlag(t *testing.T) {
	var stderr bytes.Buffer
	f, err := parseFlags([]string{"--role=node", "--config", "n.toml"}, &stderr)
	if err != nil || f.gcHeadroomMiB != -1 {
		t.Fatalf("default: %v, headroom %d MiB, want -1 (by the node's threads)", err, f.gcHeadroomMiB)
	}
	for _, c := range []struct{ flag, threads, cpus, want int }{
		{-1, 2, 2, 64}, {-1, 16, 8, 64}, {-1, 1, 2, 0}, {0, 2, 2, 0}, {300, 1, 2, 300},
	} {
		if got := gcHeadroomMiB(c.flag, c.threads, c.cpus); got != c.want {
			t.Errorf("flag %d, %d threads on %d CPUs: %d MiB, want %d", c.flag, c.threads, c.cpus, got, c.want)
		}
	}
	for _, bad := range []string{"-2", "65537"} {
		if _, err := parseFlags([]string{"--role=node", "--config", "n.toml", "--gc-headroom-mib", bad}, &stderr); err == nil ||
			!strings.Contains(err.Error(), "--gc-headroom-mib "+bad) {
			t.Errorf("--gc-headroom-mib %s: %v, want an error naming it", bad, err)
		}
	}
	percent := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }
	before := percent()
	for _, c := range []struct {
		gogc string // "" unset
		want func(p int) bool
	}{{"", func(p int) bool { return p > 1000 }}, {"100", func(p int) bool { return p == before }}} {
		t.Setenv("GOGC", c.gogc)
		if c.gogc == "" {
			os.Unsetenv("GOGC")
		}
		stop := tuneGC(context.Background(), 1024)
		time.Sleep(100 * time.Millisecond) // Run reads the heap at once
		during := percent()
		stop()
		if !c.want(during) {
			t.Errorf("GOGC %q, 1 GiB of headroom over a test's heap: percentage %d while tuning", c.gogc, during)
		}
		if after := percent(); after != before {
			t.Errorf("GOGC %q: percentage %d after tuning stopped, want %d", c.gogc, after, before)
		}
	}
}
