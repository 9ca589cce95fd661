package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// maxLineBytes bounds one line. A longer line ends the stream: skipping it
// would mean reading on to the next newline, which an endless stream
// without one never has.
const maxLineBytes = 1 << 20

var errLineTooLong = fmt.Errorf("line longer than %d bytes", maxLineBytes)

// lineReader streams a text file, gzip-compressed or not (told apart by the
// gzip magic bytes), one line at a time in constant memory. A regular file
// is opened at once; a FIFO is opened by the first read, whose context
// bounds the wait for a writer, and every read of a FIFO ends when its
// context does.
type lineReader struct {
	path string
	fifo bool
	f    *os.File // nil until a FIFO is opened
	gz   *gzip.Reader
	br   *bufio.Reader
	long []byte // holds a line that does not fit in br's buffer
	// pos is the offset in the file of the next line, lineStart that of
	// the line next last returned: byte offsets where the file is read
	// as it is (seekable), not through gzip.
	pos, lineStart int64
	scanned        int64 // lines next has returned

	ctx    context.Context // the watched context, nil when none
	disarm func()          // undoes arm
}

// openLines opens a regular file, or prepares to open a FIFO. Directories,
// devices and sockets are refused: /dev/zero would be an endless line.
func openLines(path string) (*lineReader, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, openError(path, err)
	}
	if err := checkFileMode(path, fi.Mode()); err != nil {
		return nil, err
	}
	l := &lineReader{path: path, fifo: fi.Mode()&fs.ModeNamedPipe != 0, disarm: func() {}}
	if l.fifo {
		return l, nil
	}
	if l.f, err = os.Open(path); err != nil {
		return nil, openError(path, err)
	}
	if err := l.start(); err != nil {
		l.f.Close()
		return nil, err
	}
	return l, nil
}

// openError is a file that cannot be opened, as a *FileError (exit status
// 2) that still matches fs.ErrNotExist and the like.
func openError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is in the FileError
	}
	return &FileError{Path: path, Err: err}
}

// checkFileMode accepts regular files and FIFOs (a pipe feeding data).
func checkFileMode(path string, mode fs.FileMode) error {
	switch {
	case mode.IsDir():
		return &FileError{Path: path, Reason: "is a directory, want a data file"}
	case mode&fs.ModeCharDevice != 0:
		return &FileError{Path: path, Reason: "is a character device, want a regular file or a FIFO"}
	case mode&fs.ModeDevice != 0:
		return &FileError{Path: path, Reason: "is a device, want a regular file or a FIFO"}
	case !mode.IsRegular() && mode&fs.ModeNamedPipe == 0:
		return &FileError{Path: path, Reason: fmt.Sprintf("is not a regular file or a FIFO (mode %v)", mode)}
	}
	return nil
}

// start reads from the opened file, through gzip if its first bytes say
// so.
func (l *lineReader) start() error {
	fi, err := l.f.Stat()
	if err != nil {
		return err
	}
	if err := checkFileMode(l.path, fi.Mode()); err != nil {
		return err
	}
	l.br = bufio.NewReaderSize(l.f, 64<<10)
	if magic, _ := l.br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		if l.gz, err = gzip.NewReader(l.br); err != nil {
			return fmt.Errorf("%s: gzip: %w", l.path, err)
		}
		l.br = bufio.NewReaderSize(l.gz, 64<<10)
	}
	return nil
}

// watch makes every read until stop is called end when ctx does, the
// opening of a FIFO included. Reads of regular files do not block; a
// FIFO's file is in the runtime's poller, so a read deadline in the past
// wakes a blocked read at once.
func (l *lineReader) watch(ctx context.Context) (stop func()) {
	l.ctx = ctx
	l.arm()
	return func() {
		l.disarm()
		l.disarm, l.ctx = func() {}, nil
	}
}

// arm sets the watched context's interruption on an open FIFO.
func (l *lineReader) arm() {
	if !l.fifo || l.f == nil || l.ctx == nil {
		return
	}
	f, fired := l.f, make(chan struct{})
	halt := context.AfterFunc(l.ctx, func() {
		f.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	l.disarm = func() {
		if !halt() {
			<-fired
			f.SetReadDeadline(time.Time{}) // the next watch may read again
		}
	}
}

// openFIFO opens the FIFO, waiting for a writer until the watched context
// ends. The open(2) itself blocks until a writer comes, so it runs on a
// goroutine that openFIFO always waits for: when the context ends first,
// openFIFO becomes a writer for a moment, which lets the open return, and
// closes what it opened.
func (l *lineReader) openFIFO() error {
	ctx := l.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := os.Open(l.path)
		done <- opened{f, err}
	}()
	var got opened
	select {
	case got = <-done:
	case <-ctx.Done():
		if got = unblockFIFOOpen(l.path, done); got.f != nil {
			got.f.Close()
		}
		return ctx.Err()
	}
	if got.err != nil {
		return got.err
	}
	l.f = got.f
	l.arm()
	if err := l.start(); err != nil {
		l.f.Close()
		l.f = nil
		return err
	}
	return nil
}

// unblockFIFOOpen opens the FIFO at path for writing, without blocking,
// until the pending open for reading reports on done. Opening for writing
// fails while the reader has not reached open(2) yet (ENXIO), so it tries
// again.
func unblockFIFOOpen[T any](path string, done <-chan T) T {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		select {
		case got := <-done:
			return got
		case <-tick.C:
		}
	}
}

// next returns the next line without its line ending ("\n" or "\r\n"); the
// slice is valid until the following call. A last line without a newline is
// a line. At the end it returns io.EOF; a line over maxLineBytes is
// errLineTooLong, after which the reader is not to be used. A FIFO is
// opened by the first call.
func (l *lineReader) next() ([]byte, error) {
	if l.f == nil {
		if err := l.openFIFO(); err != nil {
			return nil, err
		}
	}
	line, err := l.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		l.long = append(l.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = l.br.ReadSlice('\n')
			if len(l.long)+len(line) > maxLineBytes {
				return nil, errLineTooLong
			}
			l.long = append(l.long, line...)
		}
		line = l.long
	}
	l.lineStart = l.pos
	l.pos += int64(len(line))
	l.scanned++
	if errors.Is(err, io.EOF) && len(line) > 0 {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	return bytes.TrimSuffix(line, []byte{'\r'}), nil
}

// seekable reports whether the reader reads a file as it is, so that
// byte offsets of its lines are offsets in the file: a regular file that
// is not gzip-compressed.
func (l *lineReader) seekable() bool { return !l.fifo && l.gz == nil && l.f != nil }

// seekLine moves a seekable reader to the line that starts at offset in
// the file. It reports false, and leaves the reader where it was, when
// the byte before offset is not a newline: the file is not the one the
// offset was found in.
func (l *lineReader) seekLine(offset int64) (bool, error) {
	if offset > 0 {
		var before [1]byte
		if _, err := l.f.ReadAt(before[:], offset-1); err != nil || before[0] != '\n' {
			return false, nil
		}
	}
	if _, err := l.f.Seek(offset, io.SeekStart); err != nil {
		return false, fmt.Errorf("%s: seek: %w", l.path, err)
	}
	l.br.Reset(l.f)
	l.pos = offset
	return true, nil
}

func (l *lineReader) Close() error {
	var gzErr error
	if l.gz != nil {
		gzErr = l.gz.Close()
	}
	if l.f == nil {
		return gzErr
	}
	return errors.Join(gzErr, l.f.Close())
}

// splitFields splits line at every sep into dst, reusing dst's storage.
func splitFields(line []byte, sep byte, dst [][]byte) [][]byte {
	dst = dst[:0]
	for {
		i := bytes.IndexByte(line, sep)
		if i < 0 {
			return append(dst, line)
		}
		dst = append(dst, line[:i])
		line = line[i+1:]
	}
}
