package hosts

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// ParseOARNodefile reads an OAR node file (named source in errors): one
// host name per line and per allocated core, so a host's lines are
// counted into its Slots. Hosts keep the order of their first line; blank
// lines are skipped.
func ParseOARNodefile(source string, r io.Reader) ([]Host, error) {
	var out []Host
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		name := strings.TrimSpace(sc.Text())
		if name == "" {
			continue
		}
		if !hostName.MatchString(name) {
			return nil, &Error{Source: source, Line: line, Msg: fmt.Sprintf("%q is not a host name", name)}
		}
		if i, ok := index[name]; ok {
			out[i].Slots++
			continue
		}
		if len(out) == MaxHosts {
			return nil, &Error{Source: source, Line: line, Msg: fmt.Sprintf("more than %d hosts", MaxHosts)}
		}
		index[name] = len(out)
		out = append(out, Host{Name: name, Slots: 1, Line: line})
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{Source: source, Line: line + 1, Msg: err.Error()}
	}
	if len(out) == 0 {
		return nil, &Error{Source: source, Msg: "no hosts"}
	}
	return out, nil
}
