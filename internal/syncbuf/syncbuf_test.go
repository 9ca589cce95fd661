package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWritesAndReads: lines written from several goroutines
// while another reads all land whole (the race detector checks the rest).
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				fmt.Fprintf(&b, "writer %d line %d\n", w, i)
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			_ = b.Contains("writer")
		}
	})
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
	if !b.Contains("writer 3 line 99\n") || b.Contains("writer 4") {
		t.Errorf("contents: %q...", b.String()[:80])
	}
}
