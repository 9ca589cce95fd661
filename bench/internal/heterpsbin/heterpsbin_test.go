package heterpsbin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHeterps writes a script that prints out and exits with code, as a
// stand-in for heterps.
func fakeHeterps(t *testing.T, out string, code int) Tools {
	t.Helper()
	path := filepath.Join(t.TempDir(), "heterps")
	script := "#!/bin/sh\ncat <<'EOF'\n" + out + "\nEOF\necho 'daemon logs in /tmp/x' >&2\nexit " + string(rune('0'+code)) + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return Tools{Heterps: path, Heterpsd: "/nonexistent/heterpsd"}
}

func TestRunReadsADoneJob(t *testing.T) {
	tools := fakeHeterps(t, `{"state":"done","steps":200,"loss":0.52,"samples_per_s":45000,"seconds":2.5,"stages":[{"type":"cpu-2t","units":1}]}`, 0)
	r, err := tools.Run(context.Background(), "local", "job.toml")
	if err != nil {
		t.Fatal(err)
	}
	if r.Steps != 200 || r.SamplesPerS != 45000 || len(r.Stages) != 1 || r.Stages[0].Type != "cpu-2t" {
		t.Fatalf("result %+v", r)
	}
}

func TestRunRefusesAJobNotDone(t *testing.T) {
	tools := fakeHeterps(t, `{"state":"failed","reason":"node died"}`, 0)
	if _, err := tools.Run(context.Background(), "local", "job.toml"); err == nil || !strings.Contains(err.Error(), "node died") {
		t.Fatalf("err = %v, want the job's reason", err)
	}
}

func TestJSONReportsAFailedChildWithItsStderr(t *testing.T) {
	tools := fakeHeterps(t, `not json`, 1)
	var out map[string]any
	err := tools.JSON(context.Background(), &out, "train")
	if err == nil || !strings.Contains(err.Error(), "daemon logs in /tmp/x") {
		t.Fatalf("err = %v, want the child's standard error", err)
	}
}

func TestTailKeepsTheEnd(t *testing.T) {
	b := append(bytes.Repeat([]byte("a"), 5000), "END"...)
	got := Tail(b)
	if len(got) != 2000 || !bytes.HasSuffix(got, []byte("END")) {
		t.Fatalf("Tail kept %d bytes ending %q", len(got), got[len(got)-3:])
	}
}
