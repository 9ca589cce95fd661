// Package hosts reads the machines a batch scheduler allocated to a job:
// OAR's $OAR_NODEFILE, Slurm's compressed host lists and counts, and
// hostfiles (`host slots=N type=T`). `heterps launch` starts one node
// daemon per host and type from what these return.
package hosts

import (
	"fmt"
	"regexp"
	"strings"
)

// Host is one allocated machine.
type Host struct {
	Name string
	// Slots is how many units it offers: its cores (OAR, Slurm) or the
	// hostfile's slots.
	Slots int
	// Type is the hostfile's type=, empty where the source has none.
	Type string
	// Line is the line of the file it came from (0: not from a file).
	Line int
}

// Error locates a problem in an allocation: a file's line, or the
// 1-based position in a variable's value.
type Error struct {
	Source string // a file name, or NAME=value for a variable
	Line   int    // 0: none
	Pos    int    // 0: none
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Pos > 0 {
		fmt.Fprintf(&b, ": at position %d", e.Pos)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// MaxHosts bounds an allocation, so that a typo such as gpu-[1-99999999]
// is an error and not a memory blow-up.
const MaxHosts = 1 << 16

// maxSlots bounds a host's slots (the node file's bound on units).
const maxSlots = 1 << 16

// hostName is what a host name may hold (DNS names and addresses).
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)

// typeName is a catalog type's name (config's identifier).
var typeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
