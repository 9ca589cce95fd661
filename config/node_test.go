package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const goodNode = `version = 1
name = "local-0"
coordinator = "http://127.0.0.1:7070"
listen = "127.0.0.1:0"
ps_listen = "127.0.0.1:0"
type = "cpu-1t"
units = 1
plain = true
`

func TestParseNode(t *testing.T) {
	n, err := ParseNode("node.toml", []byte(goodNode))
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "local-0" || n.Threads != 1 || n.Units != 1 || !n.Plain || n.Listen != "127.0.0.1:0" {
		t.Errorf("parsed %+v", n)
	}
	if n.TCPOnly {
		t.Error("tcp_only is on by default")
	}
	n, err = ParseNode("node.toml", []byte(goodNode+"tcp_only = true\n"))
	if err != nil || !n.TCPOnly {
		t.Errorf("tcp_only = true: %+v, %v", n, err)
	}
	if n.SocketOnly {
		t.Error("socket_only is on by default")
	}
	n, err = ParseNode("node.toml", []byte(goodNode+"socket_only = true\n"))
	if err != nil || !n.SocketOnly {
		t.Errorf("socket_only = true: %+v, %v", n, err)
	}
}

func TestNodeErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		line           int
		field          string
	}{
		{"bad coordinator", `"http://127.0.0.1:7070"`, `"ftp://127.0.0.1:7070"`, 3, "coordinator"},
		{"coordinator without a port", `"http://127.0.0.1:7070"`, `"127.0.0.1"`, 3, "coordinator"},
		{"bad listen", `listen = "127.0.0.1:0"`, `listen = "nowhere"`, 4, "listen"},
		{"plain off loopback", `ps_listen = "127.0.0.1:0"`, `ps_listen = "10.1.2.3:7171"`, 5, "ps_listen"},
		{"wildcard listen", `listen = "127.0.0.1:0"`, `listen = "0.0.0.0:7071"`, 4, "listen"},
		{"no units", `units = 1`, `units = 0`, 7, "units"},
		{"no secret", `plain = true`, `plain = false`, 0, "secret_file"},
		{"unknown key", `units = 1`, `unit = 1`, 7, "unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(goodNode, tc.old, tc.new, 1)
			_, err := ParseNode("node.toml", []byte(src))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *config.Error", err)
			}
			if ce.Line != tc.line || ce.Field != tc.field || ce.File != "node.toml" {
				t.Errorf("error at %s:%d field %q (%v), want line %d field %q", ce.File, ce.Line, ce.Field, err, tc.line, tc.field)
			}
		})
	}
}

// A listen address that is not host:port says what is wrong with it.
func TestNodeListenSaysWhatIsWrong(t *testing.T) {
	for addr, why := range map[string]string{
		"":                "missing",
		"nowhere":         "no port",
		":7071":           "no host",
		"127.0.0.1:99999": `port "99999" is not a number in 0..65535`,
		"127.0.0.1:http":  `port "http" is not a number in 0..65535`,
	} {
		src := strings.Replace(goodNode, `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", addr), 1)
		_, err := ParseNode("node.toml", []byte(src))
		if want := fmt.Sprintf("listen: %q is not host:port: %s", addr, why); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("listen %q: %v, want %q", addr, err, want)
		}
	}
}

func TestNodeLease(t *testing.T) {
	n, err := ParseNode("node.toml", []byte(goodNode+"lease = \"30s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n.Lease.Duration != 30*time.Second {
		t.Errorf("lease %s, want 30s", n.Lease.Duration)
	}
	for _, bad := range []string{`lease = "soon"`, `lease = "10ms"`, `lease = "100h"`} {
		_, err := ParseNode("node.toml", []byte(goodNode+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), "lease") {
			t.Errorf("%s: %v, want an error naming lease", bad, err)
		}
	}
}

func TestNodeCPUShare(t *testing.T) {
	n, err := ParseNode("node.toml", []byte(goodNode))
	if err != nil {
		t.Fatal(err)
	}
	if n.CPUShare == nil || *n.CPUShare != 1 {
		t.Errorf("absent cpu_share: %v, want 1", n.CPUShare)
	}
	n, err = ParseNode("node.toml", []byte(goodNode+"cpu_share = 0.25\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *n.CPUShare != 0.25 {
		t.Errorf("cpu_share %g, want 0.25", *n.CPUShare)
	}
	for _, bad := range []string{"cpu_share = 0", "cpu_share = -0.5", "cpu_share = 1.5", "cpu_share = 0.001", "cpu_share = nan"} {
		_, err := ParseNode("node.toml", []byte(goodNode+bad+"\n"))
		var ce *Error
		if !errors.As(err, &ce) || ce.Field != "cpu_share" || ce.Line != 9 {
			t.Errorf("%s: %v, want an error at node.toml:9 naming cpu_share", bad, err)
		}
	}
}

func TestNodeComputeNice(t *testing.T) {
	n, err := ParseNode("node.toml", []byte(goodNode))
	if err != nil {
		t.Fatal(err)
	}
	if n.ComputeNice == nil || *n.ComputeNice != DefaultComputeNice {
		t.Errorf("absent compute_nice: %v, want %d", n.ComputeNice, DefaultComputeNice)
	}
	for _, good := range []int{0, 3, 19} {
		n, err := ParseNode("node.toml", []byte(fmt.Sprintf("%scompute_nice = %d\n", goodNode, good)))
		if err != nil || *n.ComputeNice != good {
			t.Errorf("compute_nice = %d: %v, %v", good, n, err)
		}
	}
	for _, bad := range []string{"compute_nice = -1", "compute_nice = 20", "compute_nice = 1.5", `compute_nice = "low"`} {
		_, err := ParseNode("node.toml", []byte(goodNode+bad+"\n"))
		var ce *Error
		if !errors.As(err, &ce) || ce.Field != "compute_nice" || ce.Line != 9 {
			t.Errorf("%s: %v, want an error at node.toml:9 naming compute_nice", bad, err)
		}
	}
}

func TestCoordinatorURLAcceptsHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7070":         "http://127.0.0.1:7070",
		"coord.lyon:7070":        "http://coord.lyon:7070",
		"https://10.0.0.1:7070/": "https://10.0.0.1:7070",
		"http://[::1]:7070":      "http://[::1]:7070",
	} {
		if got, err := CoordinatorURL(in); err != nil || got != want {
			t.Errorf("CoordinatorURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "localhost", "ftp://x:1", "http://"} {
		if _, err := CoordinatorURL(bad); err == nil {
			t.Errorf("CoordinatorURL(%q) accepted", bad)
		}
	}
	n, err := ParseNode("node.toml", []byte(strings.Replace(goodNode, `"http://127.0.0.1:7070"`, `"127.0.0.1:7070"`, 1)))
	if err != nil || n.Coordinator != "http://127.0.0.1:7070" {
		t.Fatalf("node file with coordinator host:port: %v, coordinator %q", err, n.Coordinator)
	}
}

func TestNodeRegisterTimeout(t *testing.T) {
	n, err := ParseNode("node.toml", []byte(goodNode+"register_timeout = \"2m\"\n"))
	if err != nil || n.RegisterTimeout.Duration != 2*time.Minute {
		t.Fatalf("register_timeout: %v, %+v", err, n)
	}
	if _, err := ParseNode("node.toml", []byte(goodNode+"register_timeout = \"-1s\"\n")); err == nil || !strings.Contains(err.Error(), "register_timeout") {
		t.Errorf("negative register_timeout: %v", err)
	}
}

func TestNodeTLS(t *testing.T) {
	tlsNode := strings.Replace(goodNode, "plain = true\n", `tls_cert = "n.pem"
tls_key = "n-key.pem"
tls_ca = "ca.pem"
`, 1)
	hostPort := strings.Replace(tlsNode, `"http://127.0.0.1:7070"`, `"127.0.0.1:7070"`, 1)
	n, err := ParseNode("node.toml", []byte(hostPort))
	if err != nil {
		t.Fatal(err)
	}
	if !n.TLS() || n.Coordinator != "https://127.0.0.1:7070" {
		t.Errorf("TLS %t, coordinator %q: want TLS and host:port read as https", n.TLS(), n.Coordinator)
	}
	withSecret := strings.Replace(hostPort, `tls_ca = "ca.pem"`, "tls_ca = \"ca.pem\"\nsecret_file = \"s\"", 1)
	if _, err := ParseNode("node.toml", []byte(withSecret)); err != nil {
		t.Errorf("TLS with a secret as well: %v", err)
	}
	for name, src := range map[string]string{
		"http coordinator":  tlsNode,
		"a missing key":     strings.Replace(hostPort, `tls_key = "n-key.pem"`+"\n", "", 1),
		"plain with TLS":    hostPort + "plain = true\n",
		"https without TLS": strings.Replace(strings.Replace(goodNode, "plain = true\n", "secret_file = \"s\"\n", 1), "http://", "https://", 1),
	} {
		if _, err := ParseNode("node.toml", []byte(src)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// gpus: one driver ordinal per unit of a GPU type, each once, none
// negative, none on a CPU type; errors name the gpus line.
func TestNodeGPUs(t *testing.T) {
	gpuNode := strings.NewReplacer(`type = "cpu-1t"`, `type = "v100"`, `units = 1`, `units = 2`).Replace(goodNode)
	n, err := ParseNode("node.toml", []byte(gpuNode+"gpus = [1, 0]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(n.GPUs) != 2 || n.GPUs[0] != 1 || n.GPUs[1] != 0 {
		t.Errorf("gpus %v, want [1 0]", n.GPUs)
	}
	for _, tc := range []struct{ name, src, want string }{
		{"duplicate", gpuNode + "gpus = [0, 0]\n", "named twice"},
		{"negative", gpuNode + "gpus = [0, -1]\n", "-1"},
		{"fewer than units", gpuNode + "gpus = [0]\n", "1 GPUs for units = 2"},
		{"more than units", gpuNode + "gpus = [0, 1, 2]\n", "3 GPUs for units = 2"},
		{"cpu type", goodNode + "gpus = [0]\n", "CPU type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNode("node.toml", []byte(tc.src))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *config.Error", err)
			}
			if ce.Field != "gpus" || ce.Line != 9 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q at line %d field %q, want %q at node.toml:9 field gpus", err, ce.Line, ce.Field, tc.want)
			}
		})
	}
}
