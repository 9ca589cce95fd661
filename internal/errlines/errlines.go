// Package errlines prints a command's error a line at a time, each line
// with the command's prefix: a file's faults, one a line, each stay
// attributable when the output is mixed with others' (a systemd journal,
// a launch log).
package errlines

import (
	"fmt"
	"io"
	"strings"
)

// Print writes err to w, each of its lines as "prefix: line".
func Print(w io.Writer, prefix string, err error) {
	for line := range strings.Lines(strings.TrimSuffix(err.Error(), "\n")) {
		fmt.Fprint(w, prefix, ": ", line)
	}
	fmt.Fprintln(w)
}
