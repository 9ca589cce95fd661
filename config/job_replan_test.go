package config

import (
	"errors"
	"testing"
)

func TestJobReplanSection(t *testing.T) {
	const head = "version = 1\nmodel = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n" +
		"[checkpoint]\nevery = 5\ndir = \"/tmp/c\"\n" // lines 1-8
	j, err := ParseJob("job.toml", []byte(head+"[replan]\nenabled = true\ngain = 0.1\nwarmup = 7\nsmoothing = 0.25\nmove_seconds = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := j.Replan; !r.Enabled || r.Gain != 0.1 || r.Warmup != 7 || r.Smoothing != 0.25 || r.MoveSeconds != 3 {
		t.Errorf("got %+v", r)
	}
	j, err = ParseJob("job.toml", []byte(head))
	if r := j.Replan; err != nil || r.Enabled || r.Gain != DefaultReplanGain || r.Warmup != DefaultReplanWarmup ||
		r.Smoothing != DefaultReplanSmoothing || r.MoveSeconds != DefaultReplanMoveSeconds {
		t.Errorf("defaults: %+v, %v", r, err)
	}
	for _, tc := range []struct {
		head, body, field string
		line              int
	}{
		{head, "gain = 1.0\n", "replan.gain", 10},
		{head, "gain = -0.1\n", "replan.gain", 10},
		{head, "warmup = -1\n", "replan.warmup", 10},
		{head, "smoothing = 1.5\n", "replan.smoothing", 10},
		{head, "move_seconds = -2.0\n", "replan.move_seconds", 10},
		{head[:len(head)-len("[checkpoint]\nevery = 5\ndir = \"/tmp/c\"\n")], "enabled = true\n", "replan.enabled", 7},
		{head + "", "enabled = true\n", "", 0},
	} {
		_, err := ParseJob("job.toml", []byte(tc.head+"[replan]\n"+tc.body))
		if tc.field == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.body, err)
			}
			continue
		}
		var cerr *Error
		if !errors.As(err, &cerr) || cerr.Field != tc.field || cerr.Line != tc.line {
			t.Errorf("%q: got %v, want an error at line %d on %s", tc.body, err, tc.line, tc.field)
		}
	}
	_, err = ParseJob("job.toml", []byte("mode = \"asp\"\n"+head+"[replan]\nenabled = true\n"))
	var cerr *Error
	if !errors.As(err, &cerr) || cerr.Field != "replan.enabled" {
		t.Errorf("asp: got %v, want an error on replan.enabled", err)
	}
}
