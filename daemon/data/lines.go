package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
)

// maxLineBytes bounds one line; longer lines are malformed.
const maxLineBytes = 1 << 20

var errLineTooLong = fmt.Errorf("line longer than %d bytes", maxLineBytes)

// lineReader streams a text file, gzip-compressed or not (told apart by the
// gzip magic bytes), one line at a time in constant memory.
type lineReader struct {
	f    *os.File
	gz   *gzip.Reader
	br   *bufio.Reader
	long []byte // holds a line that does not fit in br's buffer
}

func openLines(path string) (*lineReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	l := &lineReader{f: f, br: bufio.NewReaderSize(f, 64<<10)}
	if magic, _ := l.br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		if l.gz, err = gzip.NewReader(l.br); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: gzip: %w", path, err)
		}
		l.br = bufio.NewReaderSize(l.gz, 64<<10)
	}
	return l, nil
}

// next returns the next line without its line ending ("\n" or "\r\n"); the
// slice is valid until the following call. A last line without a newline is
// a line. At the end it returns io.EOF; a line over maxLineBytes is consumed
// and reported as errLineTooLong.
func (l *lineReader) next() ([]byte, error) {
	line, err := l.br.ReadSlice('\n')
	tooLong := false
	if errors.Is(err, bufio.ErrBufferFull) {
		l.long = append(l.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = l.br.ReadSlice('\n')
			if len(l.long)+len(line) > maxLineBytes {
				tooLong = true
			} else {
				l.long = append(l.long, line...)
			}
		}
		line = l.long
	}
	if errors.Is(err, io.EOF) && len(line) > 0 {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if tooLong {
		return nil, errLineTooLong
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	return bytes.TrimSuffix(line, []byte{'\r'}), nil
}

func (l *lineReader) Close() error {
	var gzErr error
	if l.gz != nil {
		gzErr = l.gz.Close()
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
