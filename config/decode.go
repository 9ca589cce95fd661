package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2"
)

// Error is a problem in a config file, located by line and column (1-based;
// 0 when unknown) and by the dotted field path, e.g. "layer[2].oct".
type Error struct {
	File  string
	Line  int
	Col   int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	fmt.Fprintf(&b, ": %s", e.Msg)
	return b.String()
}

// DecodeFile reads a TOML file (see ReadFile) into v strictly. See Decode.
func DecodeFile(path string, v any) ([]byte, error) {
	src, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return src, Decode(path, src, v)
}

// Decode parses src (named name in errors) into v. Unknown keys, syntax
// errors and type mismatches come back as *Error with line and column.
func Decode(name string, src []byte, v any) error {
	dec := toml.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		first := strict.Errors[0]
		row, col := first.Position()
		return &Error{File: name, Line: row, Col: col, Field: strings.Join(first.Key(), "."),
			Msg: fmt.Sprintf("unknown key (%d unknown in all)", len(strict.Errors))}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		return &Error{File: name, Line: row, Col: col, Field: strings.Join(de.Key(), "."), Msg: de.Error()}
	}
	return &Error{File: name, Msg: err.Error()}
}

// Locator finds the line of a field in a TOML source, for validation errors
// raised after decoding (where go-toml no longer knows positions). It
// understands [table], [[array.of.tables]] and key = value lines, which is
// what heterps' files use; inline tables and dotted keys are located at their
// top-level key.
type Locator struct {
	name  string
	lines []string
	// doc is the file as a generic TOML document (keysOf), parsed once.
	docOnce sync.Once
	doc     map[string]any
}

// NewLocator indexes src, named name in errors.
func NewLocator(name string, src []byte) *Locator {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return &Locator{name: name, lines: lines}
}

var (
	arrayHeader = regexp.MustCompile(`^\s*\[\[\s*([A-Za-z0-9_.\-]+)\s*\]\]`)
	tableHeader = regexp.MustCompile(`^\s*\[\s*([A-Za-z0-9_.\-]+)\s*\]`)
	keyLine     = regexp.MustCompile(`^\s*([A-Za-z0-9_\-]+)\s*=`)
	fieldPart   = regexp.MustCompile(`^([A-Za-z0-9_\-]+)(?:\[(\d+)\])?$`)
)

// Errorf returns an *Error for field (e.g. "layer[2].oct" or "batch"),
// located at its line when the field is found.
func (l *Locator) Errorf(field, format string, args ...any) *Error {
	line, col := l.find(field)
	return &Error{File: l.name, Line: line, Col: col, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// keysOf returns the keys the file sets in its table [table] (a nil
// Locator, or a file without the table, sets none): defaults must fill
// what a file leaves out, not what it sets to zero. The file is parsed
// into a generic document once, on the first call.
func (l *Locator) keysOf(table string) map[string]bool {
	if l == nil {
		return nil
	}
	l.docOnce.Do(func() {
		if toml.Unmarshal([]byte(strings.Join(l.lines, "\n")), &l.doc) != nil {
			l.doc = nil
		}
	})
	t, _ := l.doc[table].(map[string]any)
	keys := make(map[string]bool, len(t))
	for k := range t {
		keys[k] = true
	}
	return keys
}

// find returns the 1-based line and column of field, or of the closest
// enclosing table that exists, or 0, 0.
func (l *Locator) find(field string) (int, int) {
	table, index, key := splitField(field)
	start, end := 0, len(l.lines)
	bestLine := 0
	if table != "" {
		s, e, ok := l.section(table, index)
		if !ok {
			return 0, 0
		}
		start, end, bestLine = s+1, e, s+1
	} else {
		end = l.firstHeader()
	}
	if key == "" {
		return bestLine, 1
	}
	for i := start; i < end; i++ {
		if m := keyLine.FindStringSubmatchIndex(l.lines[i]); m != nil && l.lines[i][m[2]:m[3]] == key {
			return i + 1, m[2] + 1
		}
	}
	return bestLine, 0
}

// splitField turns "layer[2].oct" into ("layer", 2, "oct") and "batch" into
// ("", -1, "batch"); "catalog.node[1].name" into ("catalog.node", 1, "name").
func splitField(field string) (table string, index int, key string) {
	parts := strings.Split(field, ".")
	index = -1
	last := len(parts) - 1
	var tparts []string
	for i, p := range parts {
		m := fieldPart.FindStringSubmatch(p)
		if m == nil {
			return "", -1, field
		}
		if i == last && m[2] == "" {
			key = m[1]
			break
		}
		tparts = append(tparts, m[1])
		if m[2] != "" {
			index, _ = strconv.Atoi(m[2])
		}
	}
	return strings.Join(tparts, "."), index, key
}

// section finds the header of table (the index-th [[table]] when index >= 0)
// and returns its line and the line where the next header starts.
func (l *Locator) section(table string, index int) (int, int, bool) {
	seen := -1
	for i, line := range l.lines {
		var name string
		if m := arrayHeader.FindStringSubmatch(line); m != nil {
			name = m[1]
		} else if m := tableHeader.FindStringSubmatch(line); m != nil && index < 0 {
			name = m[1]
		}
		if name != table {
			continue
		}
		seen++
		if index < 0 || seen == index {
			return i, l.nextHeader(i + 1), true
		}
	}
	return 0, 0, false
}

func (l *Locator) firstHeader() int { return l.nextHeader(0) }

func (l *Locator) nextHeader(from int) int {
	for i := from; i < len(l.lines); i++ {
		if tableHeader.MatchString(l.lines[i]) {
			return i
		}
	}
	return len(l.lines)
}
