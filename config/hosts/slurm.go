package hosts

import (
	"fmt"
	"strconv"
)

// SlurmHosts reads a Slurm allocation from its environment (getenv is
// os.Getenv in the CLI): the hosts of SLURM_JOB_NODELIST (or the older
// SLURM_NODELIST), and each host's cores from SLURM_JOB_CPUS_PER_NODE,
// else SLURM_TASKS_PER_NODE (both "2(x3),1"), else SLURM_CPUS_ON_NODE
// (one count for every host), else 1.
func SlurmHosts(getenv func(string) string) ([]Host, error) {
	listVar := "SLURM_JOB_NODELIST"
	if getenv(listVar) == "" {
		listVar = "SLURM_NODELIST"
	}
	list := getenv(listVar)
	if list == "" {
		return nil, fmt.Errorf("SLURM_JOB_NODELIST is not set: run inside a Slurm allocation (salloc, sbatch)")
	}
	names, err := ExpandHostlist(listVar, list)
	if err != nil {
		return nil, err
	}
	counts, err := slurmCounts(getenv, listVar, len(names))
	if err != nil {
		return nil, err
	}
	out := make([]Host, len(names))
	for i, n := range names {
		out[i] = Host{Name: n, Slots: counts[i]}
	}
	return out, nil
}

func slurmCounts(getenv func(string) string, listVar string, hosts int) ([]int, error) {
	for _, v := range []string{"SLURM_JOB_CPUS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
		value := getenv(v)
		if value == "" {
			continue
		}
		counts, err := ExpandCounts(v, value)
		if err != nil {
			return nil, err
		}
		if len(counts) != hosts {
			return nil, &Error{Source: fmt.Sprintf("%s %q", v, value), Msg: fmt.Sprintf("%d counts for the %d hosts of %s", len(counts), hosts, listVar)}
		}
		return counts, nil
	}
	each := 1
	if value := getenv("SLURM_CPUS_ON_NODE"); value != "" {
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > maxSlots {
			return nil, &Error{Source: fmt.Sprintf("SLURM_CPUS_ON_NODE %q", value), Msg: fmt.Sprintf("want a whole number in 1..%d", maxSlots)}
		}
		each = n
	}
	counts := make([]int, hosts)
	for i := range counts {
		counts[i] = each
	}
	return counts, nil
}

// ExpandHostlist expands a Slurm host list such as "gpu-[01-04,07],cpu-1"
// or "rack[1-2]-n[01-02]" (every bracket group multiplies: rack1-n01,
// rack1-n02, rack2-n01, rack2-n02), keeping the low bound's zero padding.
// name is the variable's name, for errors, which give the 1-based position
// in value.
func ExpandHostlist(name, value string) ([]string, error) {
	p := &listParser{s: value, source: fmt.Sprintf("%s %q", name, value)}
	var out []string
	seen := map[string]bool{}
	for {
		start := p.pos
		item, err := p.item(MaxHosts - len(out))
		if err != nil {
			return nil, err
		}
		for _, h := range item {
			if seen[h] {
				return nil, p.errAt(start, "host %s is listed twice", h)
			}
			seen[h] = true
		}
		out = append(out, item...)
		if p.pos == len(p.s) {
			return out, nil
		}
		p.pos++ // the ',' that ended the item
	}
}

// listParser reads a host list; pos is the next byte.
type listParser struct {
	s, source string
	pos       int
}

func (p *listParser) errAt(pos int, format string, args ...any) error {
	return &Error{Source: p.source, Pos: pos + 1, Msg: fmt.Sprintf(format, args...)}
}

func (p *listParser) peek() byte {
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}

// item reads one comma-separated entry up to a ',' outside brackets or the
// end, and expands it into at most room names.
func (p *listParser) item(room int) ([]string, error) {
	start := p.pos
	names := []string{""}
	for p.pos < len(p.s) && p.s[p.pos] != ',' {
		switch c := p.s[p.pos]; {
		case c == '[':
			open := p.pos
			parts, err := p.brackets()
			if err != nil {
				return nil, err
			}
			if len(names)*len(parts) > room {
				return nil, p.errAt(open, "more than %d hosts", MaxHosts)
			}
			next := make([]string, 0, len(names)*len(parts))
			for _, n := range names {
				for _, part := range parts {
					next = append(next, n+part)
				}
			}
			names = next
		case c == ']':
			return nil, p.errAt(p.pos, "']' without '['")
		case isHostChar(c):
			from := p.pos
			for p.pos < len(p.s) && isHostChar(p.s[p.pos]) {
				p.pos++
			}
			for i := range names {
				names[i] += p.s[from:p.pos]
			}
		default:
			return nil, p.errAt(p.pos, "unexpected %q in a host name", c)
		}
	}
	if p.pos == start {
		return nil, p.errAt(start, "empty host name")
	}
	for _, n := range names {
		if !hostName.MatchString(n) {
			return nil, p.errAt(start, "%q is not a host name", n)
		}
	}
	return names, nil
}

func isHostChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
}

// brackets reads "[01-04,07]" at p.pos and returns "01", "02", "03", "04",
// "07": each range padded to its low bound's width.
func (p *listParser) brackets() ([]string, error) {
	open := p.pos
	p.pos++
	var out []string
	for {
		from := p.pos
		lo, width, err := p.number(open)
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.peek() == '-' {
			p.pos++
			if hi, _, err = p.number(open); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errAt(from, "range %s runs backwards", p.s[from:p.pos])
			}
		}
		if hi-lo >= MaxHosts-len(out) {
			return nil, p.errAt(from, "more than %d hosts", MaxHosts)
		}
		for v := lo; v <= hi; v++ {
			out = append(out, fmt.Sprintf("%0*d", width, v))
		}
		switch c := p.peek(); c {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return out, nil
		case 0:
			return nil, p.errAt(open, "'[' is never closed")
		case '[':
			return nil, p.errAt(p.pos, "'[' inside brackets (they do not nest)")
		default:
			return nil, p.errAt(p.pos, "unexpected %q in a range (want digits, '-', ',' or ']')", c)
		}
	}
}

// number reads the digits at p.pos: their value and how many there are.
func (p *listParser) number(open int) (int, int, error) {
	from := p.pos
	for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		p.pos++
	}
	switch {
	case p.pos == from && p.pos == len(p.s):
		return 0, 0, p.errAt(open, "'[' is never closed")
	case p.pos == from:
		return 0, 0, p.errAt(p.pos, "want a number, got %q", p.s[p.pos])
	case p.pos-from > 9:
		return 0, 0, p.errAt(from, "number %s is too long", p.s[from:p.pos])
	}
	v, _ := strconv.Atoi(p.s[from:p.pos])
	return v, p.pos - from, nil
}

// ExpandCounts expands Slurm's per-node counts, "2(x3),1" into 2, 2, 2, 1
// (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE). name is the variable's
// name, for errors.
func ExpandCounts(name, value string) ([]int, error) {
	p := &listParser{s: value, source: fmt.Sprintf("%s %q", name, value)}
	var out []int
	for {
		from := p.pos
		n, _, err := p.count()
		if err != nil {
			return nil, err
		}
		if n < 1 || n > maxSlots {
			return nil, p.errAt(from, "count %d is not in 1..%d", n, maxSlots)
		}
		times := 1
		if p.peek() == '(' {
			if times, err = p.repeat(); err != nil {
				return nil, err
			}
		}
		if times > MaxHosts-len(out) {
			return nil, p.errAt(from, "more than %d hosts", MaxHosts)
		}
		for range times {
			out = append(out, n)
		}
		switch c := p.peek(); c {
		case 0:
			return out, nil
		case ',':
			p.pos++
		default:
			return nil, p.errAt(p.pos, "unexpected %q (want ',' or the end)", c)
		}
	}
}

// count reads a number outside brackets.
func (p *listParser) count() (int, int, error) {
	if p.pos == len(p.s) {
		return 0, 0, p.errAt(p.pos, "want a number, got the end")
	}
	return p.number(p.pos)
}

// repeat reads "(xN)" and returns N.
func (p *listParser) repeat() (int, error) {
	open := p.pos
	if p.pos+1 >= len(p.s) || p.s[p.pos+1] != 'x' {
		return 0, p.errAt(p.pos, "want (xN) after a count")
	}
	p.pos += 2
	n, _, err := p.count()
	if err != nil {
		return 0, err
	}
	if p.peek() != ')' {
		return 0, p.errAt(open, "'(' is never closed")
	}
	p.pos++
	if n < 1 {
		return 0, p.errAt(open, "repeat count 0")
	}
	return n, nil
}
