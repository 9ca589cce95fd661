package config

import (
	"reflect"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// SetStrings returns src, a TOML file, with the string values of fields
// (named as in errors: "model", "checkpoint.dir") replaced where they
// stand, so that every other line, its comments and every line number
// stay as they were: errors about the new text point at the author's
// lines. ok is false, and out nil, where a field is not set as a one-line
// string alone on its key's line (in an inline table, as a multi-line
// string, under a quoted key): the caller must rewrite the document
// another way.
func SetStrings(src []byte, values map[string]string) (out []byte, ok bool) {
	loc := NewLocator("", src)
	lines := append([]string(nil), loc.lines...)
	for field, v := range values {
		line, col := loc.find(field)
		if line == 0 || col == 0 {
			return nil, false
		}
		set, ok := setStringLine(lines[line-1], col-1, lastKey(field), v)
		if !ok {
			return nil, false
		}
		lines[line-1] = set
	}
	out = []byte(strings.Join(lines, "\n") + "\n")
	if !sameButFor(src, out, values) {
		return nil, false
	}
	return out, true
}

// setStringLine replaces the value of key, which starts line at byte at,
// by v, dropping the line's comment; ok is false unless the line sets key
// to a string and nothing else.
func setStringLine(line string, at int, key, v string) (string, bool) {
	var probe map[string]any
	if toml.Unmarshal([]byte(line[at:]), &probe) != nil || len(probe) != 1 {
		return "", false
	}
	if _, isString := probe[key].(string); !isString {
		return "", false
	}
	enc, err := toml.Marshal(map[string]string{key: v})
	if err != nil {
		return "", false
	}
	return line[:at] + strings.TrimSpace(string(enc)), true
}

func lastKey(field string) string { return field[strings.LastIndexByte(field, '.')+1:] }

// sameButFor reports whether after decodes to what before does with
// values set at their fields (dotted paths through tables).
func sameButFor(before, after []byte, values map[string]string) bool {
	var want, got map[string]any
	if toml.Unmarshal(before, &want) != nil || toml.Unmarshal(after, &got) != nil {
		return false
	}
	for field, v := range values {
		parts := strings.Split(field, ".")
		t := want
		for _, p := range parts[:len(parts)-1] {
			next, ok := t[p].(map[string]any)
			if !ok {
				return false
			}
			t = next
		}
		t[parts[len(parts)-1]] = v
	}
	return reflect.DeepEqual(want, got)
}
