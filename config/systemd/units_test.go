package systemd

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../.."

// fakeBin makes a directory with executables named heterps and heterpsd,
// so that install-files runs without building the real ones.
func fakeBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"heterps", "heterpsd"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func makeInstall(t *testing.T, vars ...string) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	args := append([]string{"-s", "-C", repoRoot, "install-files", "BIN=" + fakeBin(t)}, vars...)
	if out, err := exec.Command("make", args...).CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func listFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestMakeInstallDestdir: make install under DESTDIR puts the binaries,
// the units (pointing at PREFIX's bin, not DESTDIR's), the drop-in, the
// sysusers file, the guide and every example config in place.
func TestMakeInstallDestdir(t *testing.T) {
	dest := t.TempDir()
	makeInstall(t, "DESTDIR="+dest)
	want := []string{
		"usr/local/bin/heterps",
		"usr/local/bin/heterpsd",
		"usr/local/lib/systemd/system/heterpsd-coordinator.service",
		"usr/local/lib/systemd/system/heterpsd-node@.service",
		"usr/local/lib/systemd/system/heterpsd-node@.service.d/gpu.conf",
		"usr/local/lib/sysusers.d/heterps.conf",
		"usr/local/share/doc/heterps/deploy.md",
		"usr/local/share/heterps/examples/grafana/heterps.json",
	}
	for _, src := range []string{"../examples", "examples"} {
		at := "usr/local/share/heterps/examples"
		if src == "examples" {
			at += "/systemd"
		}
		for _, f := range listFiles(t, src) {
			if filepath.Ext(f) != ".go" { // the package that embeds the examples is not one
				want = append(want, filepath.Join(at, f))
			}
		}
	}
	slices.Sort(want)
	got := listFiles(t, dest)
	if !slices.Equal(got, want) {
		t.Errorf("installed:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	unit, err := os.ReadFile(filepath.Join(dest, "usr/local/lib/systemd/system/heterpsd-node@.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/heterpsd --role=node --config /etc/heterps/nodes/%i.toml") ||
		strings.Contains(string(unit), "@BINDIR@") || strings.Contains(string(unit), dest) {
		t.Errorf("installed node unit:\n%s", unit)
	}
	if info, err := os.Stat(filepath.Join(dest, "usr/local/bin/heterpsd")); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("bin/heterpsd: %v %v, want mode 0755", info.Mode(), err)
	}
}

// TestSystemdAnalyzeVerify installs the units under a temporary PREFIX
// (so that ExecStart's binaries exist) and has systemd-analyze verify
// them, the node template through an instance so that its drop-in is read
// too. A warning (an unknown key, say) fails the test as an error does.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the units are not verified")
	}
	prefix := t.TempDir()
	makeInstall(t, "PREFIX="+prefix)
	units := filepath.Join(prefix, "lib/systemd/system")
	for _, unit := range []string{"heterpsd-coordinator.service", "heterpsd-node@cpu.service"} {
		cmd := exec.Command(analyze, "verify", filepath.Join(units, unit))
		cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=warning")
		out, err := cmd.CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
		}
	}
}

// TestUnitsSettings: the settings the deployment guide relies on.
func TestUnitsSettings(t *testing.T) {
	common := []string{"Type=notify", "WatchdogSec=30", "Restart=on-failure", "RestartPreventExitStatus=2",
		"StateDirectory=heterps", "ConfigurationDirectory=heterps", "User=heterps", "DynamicUser=no",
		"ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "NoNewPrivileges=yes",
		"ReadWritePaths=-/srv/heterps/checkpoints"}
	for file, extra := range map[string][]string{
		"heterpsd-coordinator.service": {"--state-dir /var/lib/heterps/coordinator", "--secret-file /etc/heterps/secret"},
		"heterpsd-node@.service":       {"--config /etc/heterps/nodes/%i.toml", "DevicePolicy=closed"},
		"heterpsd-node@.service.d/gpu.conf": {"DevicePolicy=closed", "DeviceAllow=char-nvidia-frontend rw",
			"DeviceAllow=/dev/nvidiactl rw", "DeviceAllow=/dev/nvidia-uvm rw"},
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want := extra
		if !strings.HasSuffix(file, ".conf") {
			want = append(slices.Clone(common), extra...)
		}
		for _, w := range want {
			if !strings.Contains(string(src), w) {
				t.Errorf("%s lacks %q", file, w)
			}
		}
	}
	sysusers, err := os.ReadFile("heterps.sysusers.conf")
	if err != nil || !strings.Contains(string(sysusers), "u heterps - ") {
		t.Errorf("heterps.sysusers.conf: %v %q", err, sysusers)
	}
}
