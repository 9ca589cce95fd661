package alloc

import (
	"strings"
	"testing"
)

func TestReadTrace(t *testing.T) {
	got, err := ReadTrace("t.jsonl", strings.NewReader(`{"t":0.5,"step":1,"loss":2,"units":1,"step_s":0}`+"\n\n"+
		`{"t":1,"step":3,"loss":1.5,"units":2,"step_s":0.25}`+"\n"))
	if err != nil || len(got) != 2 || got[1] != (TraceLine{T: 1, Step: 3, Loss: 1.5, Units: 2, StepSeconds: 0.25}) {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, bad := range []string{
		`{"step":2,"loss":1}` + "\n" + `{"step":2,"loss":1}`,
		`{"step":1,"loss":1,"units":-1}`,
		`{"step":1,"loss":"x"}`,
	} {
		if _, err := ReadTrace("t.jsonl", strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "t.jsonl:") {
			t.Errorf("%q: got %v, want an error naming the line", bad, err)
		}
	}
}
