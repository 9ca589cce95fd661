package api

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// JobFileParam is the query parameter of POST /v1/jobs that names the
// submitted job file as its author knows it ("jobs/ctr.toml"), so that the
// coordinator's errors about the file point at it; without it they name
// "job.toml".
const JobFileParam = "file"

// MaxJobFileName bounds a JobFileParam's bytes.
const MaxJobFileName = 1024

// CheckJobFileName checks a JobFileParam: 1..MaxJobFileName bytes of
// UTF-8 without control characters, so that a name cannot forge lines of
// an error message or a log.
func CheckJobFileName(name string) error {
	switch {
	case name == "" || len(name) > MaxJobFileName:
		return fmt.Errorf("query parameter %s: %d bytes, want 1..%d", JobFileParam, len(name), MaxJobFileName)
	case !utf8.ValidString(name):
		return fmt.Errorf("query parameter %s: not UTF-8", JobFileParam)
	}
	for i, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("query parameter %s: byte %d is the control character %q", JobFileParam, i+1, r)
		}
	}
	return nil
}
