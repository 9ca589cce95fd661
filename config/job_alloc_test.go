package config

import (
	"errors"
	"testing"
)

func TestJobAllocFields(t *testing.T) {
	const head = "version = 1\nmodel = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n" // lines 1-5
	j, err := ParseJob("job.toml", []byte(head+"priority = 3\ntarget_loss_reduction = 0.9\ntrace = \"/tmp/t.jsonl\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if j.JobPriority() != 3 || j.TargetLossReduction != 0.9 || j.Trace != "/tmp/t.jsonl" {
		t.Errorf("got priority %v, target %v, trace %q", j.JobPriority(), j.TargetLossReduction, j.Trace)
	}
	j, err = ParseJob("job.toml", []byte(head))
	if err != nil || j.JobPriority() != 1 || j.TargetLossReduction != 0 {
		t.Errorf("defaults: priority %v, target %v, err %v; want 1, 0", j.JobPriority(), j.TargetLossReduction, err)
	}
	for _, tc := range []struct{ body, field string }{
		{"priority = -1.0\n", "priority"},
		{"priority = nan\n", "priority"},
		{"target_loss_reduction = 1.5\n", "target_loss_reduction"},
		{"target_loss_reduction = -0.1\n", "target_loss_reduction"},
		{"trace = \" x\"\n", "trace"},
	} {
		_, err := ParseJob("job.toml", []byte(head+tc.body))
		var cerr *Error
		if !errors.As(err, &cerr) || cerr.Field != tc.field || cerr.Line != 6 {
			t.Errorf("%q: got %v, want an error at line 6 on %s", tc.body, err, tc.field)
		}
	}
}
