package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open-secret")
	if err := os.WriteFile(open, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	node := func(extra string) string {
		return "name = \"n1\"\ncoordinator = \"http://10.0.0.1:7070\"\nlisten = \"10.0.0.3:7071\"\nps_listen = \"10.0.0.3:7171\"\ntype = \"cpu\"\nunits = 4\n" + extra
	}
	for _, tc := range []struct {
		name, src string
		status    int
		want      string // in stdout when valid, stderr when not
	}{
		{"node", node("secret_file = \"" + secret + "\"\n"), exitOK, "node file, valid: node n1 offers 4 unit(s) of cpu"},
		{"catalog", "[[type]]\nname = \"cpu\"\nkind = \"cpu\"\nprice = 0.1\nmax_units = 8\npeak_flops = 1e11\nmem_bandwidth = 1e10\nlink_bandwidth = 1e9\n",
			exitOK, "coordinator catalog, valid: 1 type(s), 0 node(s)"},
		{"bad-units", strings.Replace(node("plain = true\n"), "units = 4", "units = 0", 1),
			exitUsage, "bad-units.toml:6:1: units: must be in 1..65536, got 0"},
		{"two-faults", strings.Replace(strings.Replace(node("plain = true\n"), "units = 4", "units = 0", 1), "ps_listen = \"10.0.0.3:7171\"", "ps_listen = \"nowhere\"", 1),
			exitUsage, "two-faults.toml:4:1: ps_listen: \"nowhere\" is not host:port: no port (port 0 picks a free one)\nheterpsd: "},
		{"open-secret", node("secret_file = \"" + open + "\"\n"), exitUsage, "open-secret.toml:7:1: secret_file: "},
		{"far-cpu", node("secret_file = \"" + secret + "\"\ncpus = \"8000\"\n"), exitUsage, "far-cpu.toml:8:1: cpus: CPU 8000 is not one this process may run on"},
		{"bad-cpus", node("secret_file = \"" + secret + "\"\ncpus = \"3-1\"\n"), exitUsage, "bad-cpus.toml:8:1: cpus: CPU range \"3-1\" runs backwards"},
		{"bad-catalog", "[[type]]\nname = \"cpu\"\nkind = \"tpu\"\nprice = 0.1\nmax_units = 8\npeak_flops = 1e11\nmem_bandwidth = 1e10\nlink_bandwidth = 1e9\n",
			exitUsage, "bad-catalog.toml:3:1: type[0].kind: unknown kind"},
		{"job", "model = \"ctrdnn\"\n", exitUsage, "neither a node file"},
		{"not-toml", "name = \n", exitUsage, "not-toml.toml:1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".toml")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			status := run(context.Background(), []string{"--check-config", path}, &stdout, &stderr)
			out := stdout.String()
			if status != exitOK {
				out = stderr.String()
			}
			if status != tc.status || !strings.Contains(out, tc.want) {
				t.Errorf("status %d, stdout %q, stderr %q; want %d and %q", status, stdout.String(), stderr.String(), tc.status, tc.want)
			}
		})
	}
}
