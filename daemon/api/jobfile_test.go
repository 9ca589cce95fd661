package api

import (
	"strings"
	"testing"
)

func TestCheckJobFileName(t *testing.T) {
	for _, ok := range []string{"job.toml", "jobs/ctr dnn.toml", "/srv/jobs/ctr.toml", "задание.toml", strings.Repeat("a", MaxJobFileName)} {
		if err := CheckJobFileName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                                    "0 bytes",
		strings.Repeat("a", MaxJobFileName+1): "1025 bytes",
		"job\n2026/12/07 coordinator: lies":   "byte 4 is the control character '\\n'",
		"job\x1b[31m.toml":                    "control character",
		"job\xff.toml":                        "not UTF-8",
	} {
		err := CheckJobFileName(name)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), JobFileParam) {
			t.Errorf("%q: %v, want an error naming %s and %q", name, err, JobFileParam, want)
		}
	}
}
