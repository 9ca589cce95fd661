package hosts

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ParseHostfile reads a hostfile (named source in errors): one host per
// line as `host [slots=N] [type=T]`, slots 1 when absent; '#' starts a
// comment; blank lines are skipped. A host may have several lines, one
// per type it offers, but not two with the same type.
func ParseHostfile(source string, r io.Reader) ([]Host, error) {
	var out []Host
	seen := map[[2]string]int{} // host, type -> line
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		h, err := parseHostLine(fields)
		if err != nil {
			return nil, &Error{Source: source, Line: line, Msg: err.Error()}
		}
		h.Line = line
		key := [2]string{h.Name, h.Type}
		if first, dup := seen[key]; dup {
			return nil, &Error{Source: source, Line: line, Msg: fmt.Sprintf("host %s with type %q again (first on line %d)", h.Name, h.Type, first)}
		}
		if len(out) == MaxHosts {
			return nil, &Error{Source: source, Line: line, Msg: fmt.Sprintf("more than %d hosts", MaxHosts)}
		}
		seen[key] = line
		out = append(out, h)
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{Source: source, Line: line + 1, Msg: err.Error()}
	}
	if len(out) == 0 {
		return nil, &Error{Source: source, Msg: "no hosts"}
	}
	return out, nil
}

func parseHostLine(fields []string) (Host, error) {
	h := Host{Name: fields[0], Slots: 1}
	if !hostName.MatchString(h.Name) {
		return h, fmt.Errorf("%q is not a host name", h.Name)
	}
	given := map[string]bool{}
	for _, f := range fields[1:] {
		key, value, ok := strings.Cut(f, "=")
		if !ok || value == "" {
			return h, fmt.Errorf("%q: want key=value (slots=N, type=T)", f)
		}
		if given[key] {
			return h, fmt.Errorf("%s given twice", key)
		}
		given[key] = true
		switch key {
		case "slots":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 || n > maxSlots {
				return h, fmt.Errorf("slots=%s: want a whole number in 1..%d", value, maxSlots)
			}
			h.Slots = n
		case "type":
			if !typeName.MatchString(value) {
				return h, fmt.Errorf("type=%s is not a type name", value)
			}
			h.Type = value
		default:
			return h, fmt.Errorf("unknown key %q (want slots=N or type=T)", key)
		}
	}
	return h, nil
}
