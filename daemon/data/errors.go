package data

import (
	"fmt"
	"strings"
)

// ExitBadInput is the exit status the CLI uses for bad input data.
const ExitBadInput = 2

// LineError is a malformed line in a data file.
type LineError struct {
	File   string
	Line   int64  // 1-based
	Field  string // the column's name, e.g. "C3" or "label"; empty when the whole line is wrong
	Reason string
}

func (e *LineError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	if e.Field != "" {
		fmt.Fprintf(&b, "field %s: ", e.Field)
	}
	b.WriteString(e.Reason)
	return b.String()
}

// ExitStatus makes the CLI exit with status 2 (bad input data).
func (e *LineError) ExitStatus() int { return ExitBadInput }

// FileError is a data path the readers refuse: a directory, a device, or
// a file that cannot be opened (Err, e.g. one that does not exist).
type FileError struct {
	Path   string
	Reason string
	Err    error // the cause, when opening failed
}

func (e *FileError) Error() string {
	if e.Err != nil {
		return "data file " + e.Path + ": " + e.Err.Error()
	}
	return e.Path + " " + e.Reason
}

func (e *FileError) Unwrap() error { return e.Err }

// ExitStatus makes the CLI exit with status 2 (bad input data).
func (e *FileError) ExitStatus() int { return ExitBadInput }

// SpecError is a data spec the CLI cannot use, e.g. "criteo" without a path.
type SpecError struct {
	Spec   string
	Reason string
}

func (e *SpecError) Error() string { return fmt.Sprintf("data spec %q: %s", e.Spec, e.Reason) }

// ExitStatus makes the CLI exit with status 2 (bad flags).
func (e *SpecError) ExitStatus() int { return ExitBadInput }

// fieldError is what a format's parser reports; the reader adds the file and
// line to make a LineError.
type fieldError struct {
	field  string
	reason string
}

func (e *fieldError) Error() string { return e.field + ": " + e.reason }

func badField(field, format string, args ...any) *fieldError {
	return &fieldError{field: field, reason: fmt.Sprintf(format, args...)}
}
