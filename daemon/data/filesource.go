package data

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// format decodes the lines of one kind of text file.
type format interface {
	// begin sees the file's first non-empty line and reports whether it is
	// a header rather than a record. An error here is fatal even when bad
	// lines are skipped: the file is not of this format.
	begin(first []byte) (header bool, err *fieldError)
	// parse decodes one record's line into rec, which has been reset.
	parse(line []byte, rec *record) *fieldError
}

// fileSource drives a format over a file: line numbers, header, record
// selection, bad-line policy and batching.
type fileSource struct {
	name    string
	lines   *lineReader
	format  format
	schema  Schema
	opts    Options
	rec     *record
	line    int64        // lines read so far, i.e. the current line's number
	next    int64        // index of the next record
	index   *recordIndex // the file's record marks; nil unless seekable
	jumpTo  int64        // the record to move towards at the first record (Options.Start)
	started bool         // the first non-empty line has been seen
	bad     int64
	err     error // sticky: io.EOF or the error that stopped the stream
}

func openFile(path string, f format, schema Schema, opts Options) (*fileSource, error) {
	lines, err := openLines(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if lines.fifo && opts.Shards > 1 {
		lines.Close()
		return nil, fmt.Errorf("data: %w", &FileError{Path: path, Reason: fmt.Sprintf(
			"is a FIFO, whose lines go to whichever reader takes them first: %d shards (the replicas of a data-parallel stage) cannot each read their records from it; use a regular file, or a stage of one replica", opts.Shards)})
	}
	s := &fileSource{name: path, lines: lines, format: f, schema: schema, opts: opts, rec: newRecord(schema)}
	if lines.seekable() {
		s.index = indexOf(lines.f)
		s.jumpTo = opts.Start
	}
	return s, nil
}

// nextRecord numbers the record whose line was just read, noting where
// its line starts when it is a mark's (index.go). A reader that starts at
// a record past the first mark moves there instead, at its first record
// (the header, which tells the format, is behind it), and reports jumped:
// that line is then left unnumbered.
func (s *fileSource) nextRecord() (i int64, jumped bool, err error) {
	if target := s.jumpTo; target > 0 {
		s.jumpTo = 0
		if jumped, err := s.jump(target); jumped || err != nil {
			return 0, jumped, err
		}
	}
	i = s.next
	s.next++
	if s.index != nil && i%indexEvery == 0 {
		s.index.note(i/indexEvery, recordMark{offset: s.lines.lineStart, line: s.line})
	}
	return i, false, nil
}

// jump moves the reader to the furthest mark at or before record target,
// if the index has one past the first that the file still agrees with.
func (s *fileSource) jump(target int64) (bool, error) {
	j, m, ok := s.index.before(target)
	if !ok {
		return false, nil
	}
	return s.moveTo(j, m)
}

// moveTo moves the reader to mark m, that of record j*indexEvery, unless
// the file no longer agrees with it: then the marks from j on are
// forgotten (the file changed under its identity) and the reader reads on
// from where it is.
func (s *fileSource) moveTo(j int64, m recordMark) (bool, error) {
	moved, err := s.lines.seekLine(m.offset)
	if !moved || err != nil {
		s.index.forget(j)
		return false, err
	}
	s.next, s.line = j*indexEvery, m.line-1
	return true, nil
}

func (s *fileSource) Schema() Schema  { return s.schema }
func (s *fileSource) BadLines() int64 { return s.bad }
func (s *fileSource) Close() error    { return s.lines.Close() }

// ctxCheckEvery is how many lines Next reads between cancellation checks.
const ctxCheckEvery = 1024

func (s *fileSource) Next(ctx context.Context, size int) (*Batch, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	if s.err != nil {
		return nil, s.err
	}
	stop := s.lines.watch(ctx)
	defer stop()
	b := newBatch(s.schema, size, false)
	for n := 0; b.Size < size; n++ {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if err := s.readLine(b); err != nil {
			s.err = err
			if ctx.Err() != nil && !errors.Is(err, io.EOF) {
				// The read was cut off, and what it had read is lost.
				s.err = fmt.Errorf("data: %s: line %d: %w", s.name, s.line, ctx.Err())
			}
			break
		}
	}
	if s.err != nil && (s.err != io.EOF || b.Size == 0) {
		return nil, s.err
	}
	return b, nil
}

// readLine reads one line and adds it to b when it is a record this worker
// keeps. It returns io.EOF at the end of the stream.
func (s *fileSource) readLine(b *Batch) error {
	line, kept, err := s.readRecord()
	if err != nil || !kept {
		return err
	}
	s.rec.reset()
	if ferr := s.format.parse(line, s.rec); ferr != nil {
		return s.reject(ferr)
	}
	b.add(s.rec)
	return nil
}

// readRecord reads one line, numbering it and, when it is a record,
// giving it its index, and reports whether it is a record this worker
// keeps; the line is valid until the next read. It returns io.EOF at the
// end of the stream.
func (s *fileSource) readRecord() (line []byte, kept bool, err error) {
	line, err = s.lines.next()
	if err == io.EOF {
		return nil, false, io.EOF
	}
	s.line++
	if errors.Is(err, errLineTooLong) {
		return nil, false, &LineError{File: s.name, Line: s.line, Reason: err.Error()}
	}
	if err != nil {
		return nil, false, fmt.Errorf("data: %s: line %d: %w", s.name, s.line, err)
	}
	if len(line) == 0 {
		return nil, false, nil
	}
	if !s.started {
		s.started = true
		header, ferr := s.format.begin(line)
		if ferr != nil {
			return nil, false, s.lineError(ferr)
		}
		if header {
			return nil, false, nil
		}
	}
	i, jumped, err := s.nextRecord()
	if err != nil || jumped {
		return nil, false, err
	}
	if s.opts.past(i) {
		return nil, false, io.EOF
	}
	return line, s.opts.keeps(i), nil
}

// reject skips and counts a malformed line, or stops the stream with it.
func (s *fileSource) reject(ferr *fieldError) error {
	if s.opts.SkipBadLines {
		s.bad++
		return nil
	}
	return s.lineError(ferr)
}

func (s *fileSource) lineError(ferr *fieldError) error {
	return &LineError{File: s.name, Line: s.line, Field: ferr.field, Reason: ferr.reason}
}
