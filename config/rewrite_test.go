package config

import (
	"strings"
	"testing"
)

// SetStrings replaces values where they stand: every other line, comment
// and line number is kept, and the result decodes to the original with the
// new values.
func TestSetStringsKeepsTheLines(t *testing.T) {
	src := "# a job\nversion = 1\nmodel = \"models/m.toml\"   # the model\n\n[checkpoint]\n# where\ndir = 'ck'\nevery = 2\n"
	out, ok := SetStrings([]byte(src), map[string]string{"model": "/abs/models/m.toml", "checkpoint.dir": `/abs/c"k`})
	if !ok {
		t.Fatal("refused a file of plain key = value lines")
	}
	want := "# a job\nversion = 1\nmodel = '/abs/models/m.toml'\n\n[checkpoint]\n# where\ndir = '/abs/c\"k'\nevery = 2\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	j, err := ParseJob("job.toml", append([]byte("data = \"synthetic\"\nbatch = 8\nsteps = 1\n"), out...))
	if err != nil || j.Model != "/abs/models/m.toml" || j.Checkpoint.Dir != `/abs/c"k` {
		t.Fatalf("decoded model %q, checkpoint dir %q (%v)", j.Model, j.Checkpoint.Dir, err)
	}
}

// Values that do not sit alone on their key's line as one-line strings are
// left to the caller.
func TestSetStringsRefusesWhatItCannotReplaceInPlace(t *testing.T) {
	for name, src := range map[string]string{
		"inline table":      "checkpoint = { dir = \"ck\", every = 2 }\n",
		"multi-line string": "[checkpoint]\ndir = \"\"\"\nck\"\"\"\n",
		"not a string":      "[checkpoint]\ndir = 3\n",
		"two keys a line":   "[checkpoint]\ndir = \"ck\"; every = 2\n",
		"missing":           "[checkpoint]\nevery = 2\n",
		"quoted key":        "[checkpoint]\n\"dir\" = \"ck\"\n",
	} {
		if out, ok := SetStrings([]byte(src), map[string]string{"checkpoint.dir": "/abs/ck"}); ok || out != nil {
			t.Errorf("%s: rewrote it as\n%s", name, out)
		}
	}
	if _, ok := SetStrings([]byte("model = \"m\"\n"), map[string]string{"model": strings.Repeat("x", 10)}); !ok {
		t.Error("refused a plain top-level key")
	}
}
