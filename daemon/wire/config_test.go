package wire

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeSecret(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask may have cut bits
		t.Fatal(err)
	}
	return path
}

func TestLoadSecret(t *testing.T) {
	got, err := LoadSecret(writeSecret(t, "  0123456789abcdef\n", 0o600))
	if err != nil || string(got) != "0123456789abcdef" {
		t.Fatalf("LoadSecret = %q, %v", got, err)
	}
	if _, err := LoadSecret(writeSecret(t, "0123456789abcdef", 0o640)); err != nil {
		t.Errorf("group-readable secret refused: %v", err)
	}
	refused := []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"empty", "", 0o600, "empty"},
		{"only whitespace", " \n\t\n", 0o600, "empty"},
		{"short", "tooshort", 0o600, "at least"},
		{"world-readable", "0123456789abcdef", 0o604, "other users"},
		{"world-writable", "0123456789abcdef", 0o602, "other users"},
		{"huge", strings.Repeat("x", 5000), 0o600, "larger than"},
	}
	for _, c := range refused {
		_, err := LoadSecret(writeSecret(t, c.content, c.mode))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if _, err := LoadSecret(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LoadSecret(t.TempDir()); err == nil {
		t.Error("a directory was accepted as a secret file")
	}
}

func TestConfigValidation(t *testing.T) {
	secret := []byte("0123456789abcdef")
	bad := map[string]Config{
		"no node id":          {Secret: secret},
		"node id with space":  {NodeID: "a b", Secret: secret},
		"node id too long":    {NodeID: strings.Repeat("n", 65), Secret: secret},
		"no secret":           {NodeID: "a"},
		"short secret":        {NodeID: "a", Secret: secret[:15]},
		"payload over cap":    {NodeID: "a", Secret: secret, MaxPayload: HardMaxPayload + 1},
		"payload is negative": {NodeID: "a", Secret: secret, MaxPayload: -1},
	}
	for name, c := range bad {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c, err := Config{NodeID: "node-1", Plain: true}.withDefaults()
	if err != nil {
		t.Fatalf("plain config without secret: %v", err)
	}
	if c.MaxPayload != HardMaxPayload || c.ReadTimeout <= 0 || c.QueueDepth <= 0 || c.MaxStreams <= 0 || c.Logger == nil {
		t.Errorf("defaults not filled in: %+v", c)
	}
}
