package data

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// bound is how long a read that must end may take (the race detector on
// two shared cores is slow); a hang exceeds it.
const bound = 10 * time.Second

// nextWithin calls src.Next on its own goroutine and fails the test if it
// has not returned within bound.
func nextWithin(t *testing.T, ctx context.Context, src Source, size int) (*Batch, error) {
	t.Helper()
	type result struct {
		b   *Batch
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := src.Next(ctx, size)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(bound):
		t.Fatalf("Next did not return within %v", bound)
		return nil, nil
	}
}

func mkfifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDevicesAndDirectoriesAreRefused(t *testing.T) {
	for path, want := range map[string]string{
		"/dev/zero": "/dev/zero is a character device",
		t.TempDir(): "is a directory",
	} {
		src, err := Open("criteo:"+path, Options{})
		if err == nil {
			src.Close()
			t.Fatalf("%s: opened", path)
		}
		var fe *FileError
		if !strings.Contains(err.Error(), want) || !errors.As(err, &fe) || fe.ExitStatus() != ExitBadInput {
			t.Errorf("%s: %v, want a *FileError saying %q (bad input, exit status 2)", path, err, want)
		}
	}
}

// TestEndlessLineFailsFast: a pipe that streams bytes without a newline
// (what /dev/zero would be) ends the stream with the line's error once the
// line passes the cap, even when bad lines are skipped.
func TestEndlessLineFailsFast(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := mkfifo(t)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return // the reader closed the pipe
			}
		}
	}()
	src, err := OpenCriteo(path, Options{SkipBadLines: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = nextWithin(t, context.Background(), src, 8)
	src.Close()
	<-writerDone
	var le *LineError
	if !errors.As(err, &le) || le.Line != 1 || le.Error() != path+":1: line longer than 1048576 bytes" {
		t.Fatalf("got %v, want %s:1: line longer than 1048576 bytes", err, path)
	}
}

func TestLongLineInAFileEndsTheStream(t *testing.T) {
	path := writeFile(t, "long.csv", "1\n"+strings.Repeat("x", maxLineBytes+1)+"\n2\n")
	le := lineErrorOf(t, mustOpen(t, OpenLibsvm, path, Options{SkipBadLines: true}))
	if le.Line != 2 || le.Reason != "line longer than 1048576 bytes" {
		t.Fatalf("got %v, want line 2 too long", le)
	}
}

// TestFIFOWithoutWriterEndsWithTheContext: opening the source does not
// wait for a writer; Next does, until its context ends.
func TestFIFOWithoutWriterEndsWithTheContext(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	src, err := OpenCriteo(mkfifo(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := nextWithin(t, ctx, src, 8); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's deadline", err)
	}
}

// TestFIFOStalledMidLineEndsWithTheContext: a writer sends part of a line
// and stalls; Next returns once its context ends, and the stream stays
// over.
func TestFIFOStalledMidLineEndsWithTheContext(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := mkfifo(t)
	opened := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.WriteString("0\t1\t2")
		}
		if err != nil {
			t.Error(err)
		}
		opened <- w
	}()
	src, err := OpenCriteo(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // cancel once Next has read the partial line and waits for more
		w := <-opened
		opened <- w
		if w != nil {
			waitDrained(t, w)
		}
		cancel()
	}()
	if _, err := nextWithin(t, ctx, src, 8); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), path+": line 1") {
		t.Fatalf("got %v, want the cancellation at %s line 1", err, path)
	}
	if w := <-opened; w != nil {
		w.Close()
	}
	if _, err := src.Next(context.Background(), 8); !errors.Is(err, context.Canceled) {
		t.Fatalf("after the cut-off read: %v, want the same error", err)
	}
}

// TestFIFOFeedsData: a FIFO is a legitimate source: what a writer sends
// through it reads like the same file.
func TestFIFOFeedsData(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	content, err := os.ReadFile(dataFile(t, "criteo_sample.csv"))
	if err != nil {
		t.Fatal(err)
	}
	path := mkfifo(t)
	written := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.Write(content)
			err = errors.Join(err, w.Close())
		}
		written <- err
	}()
	src := mustOpen(t, OpenCriteo, path, Options{})
	total := 0
	for {
		b, err := nextWithin(t, context.Background(), src, 64)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		total += b.Size
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if total != 200 {
		t.Fatalf("%d samples through the FIFO, want 200", total)
	}
}

// waitDrained polls until the reader has taken every byte written into w.
func waitDrained(t *testing.T, w *os.File) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		n, err := unix.IoctlGetInt(int(w.Fd()), unix.TIOCINQ)
		if err != nil || n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("the reader never read the partial line")
}

// TestAFIFOIsNotShared: shards of a FIFO are refused when opened, naming
// the file and the shards, for every file format; one reader may read it.
func TestAFIFOIsNotShared(t *testing.T) {
	path := mkfifo(t)
	for name, open := range map[string]func(string, Options) (Source, error){
		"criteo": OpenCriteo, "avazu": OpenAvazu, "libsvm": OpenLibsvm, "digits": OpenDigits,
	} {
		src, err := open(path, Options{Shard: 1, Shards: 2})
		var fe *FileError
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), path+" is a FIFO") || !strings.Contains(err.Error(), "2 shards") {
			t.Errorf("%s, shard 1 of 2: %v, want a FileError about sharing the FIFO", name, err)
		}
		if err == nil {
			src.Close()
		}
		src, err = open(path, Options{})
		if err != nil {
			t.Errorf("%s, one reader: %v", name, err)
			continue
		}
		src.Close()
	}
}
