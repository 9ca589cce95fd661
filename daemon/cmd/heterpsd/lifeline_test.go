package main

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/heterps/heterps/internal/syncbuf"
)

// TestLifelineIsCutOnlyOnceItCarriedSomething: an input that ends empty
// (a remote shell that does not forward standard input) is no lifeline;
// one that carried a byte and then ended or failed is cut.
func TestLifelineIsCutOnlyOnceItCarriedSomething(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   io.Reader
		cut  bool
	}{
		{"empty", strings.NewReader(""), false},
		{"failed at once", iotest.ErrReader(errors.New("broken pipe")), false},
		{"a line, then the end", iotest.OneByteReader(strings.NewReader("\n")), true},
		{"a byte, then a failure", io.MultiReader(strings.NewReader("x"), iotest.ErrReader(errors.New("connection reset"))), true},
	} {
		if got := watchLifeline(tc.in); got != tc.cut {
			t.Errorf("%s: cut %v, want %v", tc.name, got, tc.cut)
		}
	}
}

// TestCoordinatorStopsWhenItsLifelineCloses: with --stop-on-stdin-close a
// daemon whose standard input carried a line and then closed (heterps
// launch killed, its remote shell gone) stops as on SIGTERM and exits 0.
func TestCoordinatorStopsWhenItsLifelineCloses(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = stdin; r.Close() }()
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runMain([]string{"--role=coordinator", "--catalog", "../../../config/examples/catalogs/local.toml",
			"--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--stop-on-stdin-close"}, &stdout, &stderr)
	}()
	waitLine(t, &stdout)
	w.Write([]byte("\n"))
	select {
	case status := <-done:
		t.Fatalf("the coordinator exited (%d) while its lifeline was open; stderr:\n%s", status, stderr.String())
	case <-time.After(300 * time.Millisecond):
	}
	w.Close()
	select {
	case status := <-done:
		if status != exitOK || !strings.Contains(stderr.String(), "standard input closed") {
			t.Errorf("exit status %d, want 0 and the reason logged; stderr:\n%s", status, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the coordinator did not stop within 30 s of its standard input closing; stderr:\n%s", stderr.String())
	}
}
