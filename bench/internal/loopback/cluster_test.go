package loopback

import (
	"slices"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
)

func TestNodeFileCarriesTheCPUShare(t *testing.T) {
	for _, share := range []float64{1, 0.33, 0.14} {
		n, err := config.ParseNode("n0.toml", nodeFile("n0", "http://127.0.0.1:7070", "cpu-1t", 1, Lease, share))
		if err != nil {
			t.Fatalf("share %g: %v", share, err)
		}
		if n.CPUShare == nil || *n.CPUShare != share {
			t.Errorf("share %g: node file has cpu_share %v", share, n.CPUShare)
		}
		if n.Name != "n0" || n.Type != "cpu-1t" || n.Units != 1 || n.Threads != 1 {
			t.Errorf("share %g: node file is %+v, want n0 with one 1-thread unit of cpu-1t", share, n)
		}
	}
}

func TestTheCoordinatorGetsTheHeartbeatOfTheOptions(t *testing.T) {
	for _, tc := range []struct {
		set  time.Duration
		want string
	}{{0, Heartbeat.String()}, {250 * time.Millisecond, "250ms"}} {
		c := &Cluster{dir: "/tmp/x", addr: "127.0.0.1:1", heartbeat: Options{Heartbeat: tc.set}.heartbeat()}
		args := c.coordinatorArgs()
		i := slices.Index(args, "--heartbeat")
		if i < 0 || i+1 >= len(args) || args[i+1] != tc.want {
			t.Errorf("Heartbeat %v: coordinator args %q, want --heartbeat %s", tc.set, args, tc.want)
		}
	}
}

func TestNodeFileCarriesTheUnits(t *testing.T) {
	n, err := config.ParseNode("n0.toml", nodeFile("n0", "http://127.0.0.1:7070", "cpu-1t", 4, Lease, 1))
	if err != nil || n.Units != 4 || n.Threads != 1 {
		t.Fatalf("node file %+v (%v), want 4 units of 1 thread", n, err)
	}
}

func TestNodeFileCarriesTheLease(t *testing.T) {
	n, err := config.ParseNode("n0.toml", nodeFile("n0", "http://127.0.0.1:7070", "cpu-1t", 1, 10*time.Second, 1))
	if err != nil || n.Lease.Duration != 10*time.Second {
		t.Fatalf("node file %+v (%v), want a lease of 10 s", n, err)
	}
}
