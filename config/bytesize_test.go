package config

import (
	"strings"
	"testing"
)

func TestNodePSMemory(t *testing.T) {
	for src, want := range map[string]ByteSize{
		"":                             0,
		"ps_memory = 1000000\n":        1000000,
		`ps_memory = "4GiB"` + "\n":    4 << 30,
		`ps_memory = "512 MiB"` + "\n": 512 << 20,
		`ps_memory = "2GB"` + "\n":     2e9,
		`ps_memory = "77"` + "\n":      77,
	} {
		n, err := ParseNode("node.toml", []byte(goodNode+src))
		if err != nil {
			t.Errorf("%q: %v", src, err)
			continue
		}
		if n.PSMemory != want {
			t.Errorf("%q: %d bytes, want %d", src, n.PSMemory, want)
		}
	}
}

func TestNodePSMemoryErrors(t *testing.T) {
	for _, src := range []string{
		"ps_memory = -1\n",
		`ps_memory = "4 parsecs"` + "\n",
		`ps_memory = "-4GiB"` + "\n",
		`ps_memory = "9000000TiB"` + "\n",
		"ps_memory = 1.5\n",
	} {
		_, err := ParseNode("node.toml", []byte(goodNode+src))
		// go-toml locates a refused string, not a refused float.
		if err == nil || !strings.Contains(err.Error(), "node.toml") ||
			!(strings.Contains(err.Error(), "ps_memory") || strings.Contains(err.Error(), "not a byte size")) {
			t.Errorf("%q: got %v, want an error naming ps_memory or the byte size", src, err)
		}
	}
}
