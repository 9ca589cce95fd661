package config

import (
	"slices"
	"strings"
	"testing"
)

// TestCPUListsParseAndFormat: CPU lists as Linux writes them read into
// their CPUs and back; malformed ones name what is wrong.
func TestCPUListsParseAndFormat(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "0-3": {0, 1, 2, 3}, "8,0-1, 4": {0, 1, 4, 8}, "2-2": {2}} {
		got, err := ParseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %v (%v), want %v", in, got, err, want)
		}
	}
	if got := FormatCPUList([]int{0, 1, 2, 4, 6, 7}); got != "0-2,4,6-7" {
		t.Errorf("formatted %q", got)
	}
	for in, want := range map[string]string{"": "empty", "3-1": "backwards", "a": "not a CPU number", "0,0": "twice", "-1": "not a CPU number", "99999": "not a CPU number"} {
		if _, err := ParseCPUList(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
}

// TestANodeFileNamesItsBadCPUList: a malformed cpus line is refused with
// its line.
func TestANodeFileNamesItsBadCPUList(t *testing.T) {
	_, err := ParseNode("node.toml", []byte("version = 1\nname = \"a\"\ncoordinator = \"127.0.0.1:7070\"\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = \"cpu\"\nunits = 1\nplain = true\ncpus = \"1-0\"\n"))
	if err == nil || !strings.Contains(err.Error(), "node.toml:9") || !strings.Contains(err.Error(), "cpus") {
		t.Fatalf("got %v, want the cpus line named", err)
	}
	n, err := ParseNode("node.toml", []byte("version = 1\nname = \"a\"\ncoordinator = \"127.0.0.1:7070\"\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = \"cpu\"\nunits = 1\nplain = true\ncpus = \"0-1\"\n"))
	if err != nil || !slices.Equal(n.CPUList(), []int{0, 1}) {
		t.Fatalf("%v (%v)", n, err)
	}
}
