package ckpt

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// metadataKey is the header entry that holds the string-to-string metadata.
const metadataKey = "__metadata__"

// headerAlign is the multiple the header length is padded to with spaces, as
// the reference implementation does, so the data section starts 8-aligned.
const headerAlign = 8

// TensorInfo describes one tensor of a checkpoint file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	// Begin and End are the tensor's byte range within the data section.
	Begin, End int64
}

// NumElements returns the number of elements, the product of the shape.
func (t TensorInfo) NumElements() int64 { return (t.End - t.Begin) / t.DType.Size() }

// FormatError reports a checkpoint file that breaks the format.
type FormatError struct {
	File   string // the path, or the name given to NewReader
	Tensor string // the tensor at fault; empty for problems of the whole file
	Reason string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("checkpoint %s: tensor %q: %s", e.File, e.Tensor, e.Reason)
	}
	return fmt.Sprintf("checkpoint %s: %s", e.File, e.Reason)
}

// encodeHeader returns the JSON header, padded, for tensors already laid out
// in data order. Metadata keys are sorted so equal inputs give equal bytes.
func encodeHeader(meta map[string]string, tensors []TensorInfo) []byte {
	b := []byte{'{'}
	if len(meta) > 0 {
		b = appendJSONString(b, metadataKey)
		b = append(b, ":{"...)
		for i, k := range slices.Sorted(maps.Keys(meta)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, meta[k])
		}
		b = append(b, '}')
	}
	for i, t := range tensors {
		if i > 0 || len(meta) > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t.Name)
		b = append(b, `:{"dtype":"`...)
		b = append(b, t.DType.String()...)
		b = append(b, `","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, t.Begin, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, t.End, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%headerAlign != 0 {
		b = append(b, ' ')
	}
	return b
}

// appendJSONString appends s as a JSON string, escaping only what JSON
// requires (no HTML escaping), as the reference implementation does.
func appendJSONString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes; writing to a bytes.Buffer cannot fail
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// headerParser reads a header strictly, token by token, so that duplicate
// keys, unknown fields and non-integer numbers are caught rather than
// silently resolved as encoding/json's Unmarshal would.
type headerParser struct {
	file string
	dec  *json.Decoder
}

// parseHeader returns the metadata and the tensors, in header order, of a
// header. It checks the header's syntax and each entry; validateLayout checks
// how the tensors sit in the data section.
func parseHeader(file string, hdr []byte) (map[string]string, []TensorInfo, error) {
	p := &headerParser{file: file}
	if !utf8.Valid(hdr) {
		return nil, nil, p.fail("", "header is not valid UTF-8")
	}
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, nil, p.fail("", "header does not start with '{'")
	}
	p.dec = json.NewDecoder(bytes.NewReader(hdr))
	p.dec.UseNumber()
	meta, tensors, err := p.top()
	if err != nil {
		return nil, nil, err
	}
	rest := hdr[p.dec.InputOffset():]
	if len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, nil, p.fail("", "header has data after its JSON object")
	}
	return meta, tensors, nil
}

func (p *headerParser) top() (map[string]string, []TensorInfo, error) {
	if err := p.delim('{', "", "header is not a JSON object"); err != nil {
		return nil, nil, err
	}
	var meta map[string]string
	var tensors []TensorInfo
	seen := map[string]bool{}
	for p.dec.More() {
		name, err := p.key("")
		if err != nil {
			return nil, nil, err
		}
		if seen[name] && name == metadataKey {
			return nil, nil, p.fail("", metadataKey+" appears twice in the header")
		}
		if seen[name] {
			return nil, nil, p.fail(name, "appears twice in the header")
		}
		seen[name] = true
		if name == metadataKey {
			if meta, err = p.metadata(); err != nil {
				return nil, nil, err
			}
			continue
		}
		if name == "" {
			return nil, nil, p.fail("", "a tensor has an empty name")
		}
		t, err := p.tensor(name)
		if err != nil {
			return nil, nil, err
		}
		tensors = append(tensors, t)
	}
	if err := p.delim('}', "", "header object is not closed"); err != nil {
		return nil, nil, err
	}
	return meta, tensors, nil
}

func (p *headerParser) metadata() (map[string]string, error) {
	if err := p.delim('{', "", metadataKey+" is not a JSON object"); err != nil {
		return nil, err
	}
	meta := map[string]string{}
	for p.dec.More() {
		k, err := p.key("")
		if err != nil {
			return nil, err
		}
		if _, dup := meta[k]; dup {
			return nil, p.fail("", fmt.Sprintf("%s: key %q appears twice", metadataKey, k))
		}
		v, err := p.string("", fmt.Sprintf("%s: value of %q is not a string", metadataKey, k))
		if err != nil {
			return nil, err
		}
		meta[k] = v
	}
	return meta, p.delim('}', "", metadataKey+" is not closed")
}

func (p *headerParser) tensor(name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if err := p.delim('{', name, "entry is not a JSON object"); err != nil {
		return t, err
	}
	var haveDType, haveShape, haveOffsets bool
	for p.dec.More() {
		field, err := p.key(name)
		if err != nil {
			return t, err
		}
		switch field {
		case "dtype":
			if haveDType {
				return t, p.fail(name, "field dtype appears twice")
			}
			haveDType = true
			s, err := p.string(name, "dtype is not a string")
			if err != nil {
				return t, err
			}
			var ok bool
			if t.DType, ok = parseDType(s); !ok {
				return t, p.fail(name, fmt.Sprintf("unknown dtype %q (this reader knows F32 and I64)", s))
			}
		case "shape":
			if haveShape {
				return t, p.fail(name, "field shape appears twice")
			}
			haveShape = true
			if t.Shape, err = p.ints(name, "shape", MaxRank); err != nil {
				return t, err
			}
		case "data_offsets":
			if haveOffsets {
				return t, p.fail(name, "field data_offsets appears twice")
			}
			haveOffsets = true
			offs, err := p.ints(name, "data_offsets", 2)
			if err != nil {
				return t, err
			}
			if len(offs) != 2 {
				return t, p.fail(name, fmt.Sprintf("data_offsets has %d numbers, not 2", len(offs)))
			}
			t.Begin, t.End = offs[0], offs[1]
		default:
			return t, p.fail(name, fmt.Sprintf("unknown field %q", field))
		}
	}
	if err := p.delim('}', name, "entry is not closed"); err != nil {
		return t, err
	}
	switch {
	case !haveDType:
		return t, p.fail(name, "has no dtype")
	case !haveShape:
		return t, p.fail(name, "has no shape")
	case !haveOffsets:
		return t, p.fail(name, "has no data_offsets")
	}
	return t, nil
}

// ints reads an array of at most limit non-negative integers.
func (p *headerParser) ints(tensor, field string, limit int) ([]int64, error) {
	if err := p.delim('[', tensor, field+" is not an array"); err != nil {
		return nil, err
	}
	out := []int64{}
	for i := 0; p.dec.More(); i++ {
		if i == limit {
			return nil, p.fail(tensor, fmt.Sprintf("%s has more than %d entries", field, limit))
		}
		tok, err := p.token(tensor)
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, p.fail(tensor, fmt.Sprintf("%s[%d] is not a number", field, i))
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		switch {
		case err != nil:
			return nil, p.fail(tensor, fmt.Sprintf("%s[%d] = %s is not a 64-bit integer", field, i, num))
		case v < 0:
			return nil, p.fail(tensor, fmt.Sprintf("%s[%d] is negative (%d)", field, i, v))
		}
		out = append(out, v)
	}
	return out, p.delim(']', tensor, field+" is not closed")
}

func (p *headerParser) key(tensor string) (string, error) {
	return p.string(tensor, "expected an object key")
}

func (p *headerParser) string(tensor, what string) (string, error) {
	tok, err := p.token(tensor)
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", p.fail(tensor, what)
	}
	return s, nil
}

func (p *headerParser) delim(want json.Delim, tensor, what string) error {
	tok, err := p.token(tensor)
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return p.fail(tensor, what)
	}
	return nil
}

func (p *headerParser) token(tensor string) (json.Token, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.fail(tensor, fmt.Sprintf("header is not valid JSON: %v", err))
	}
	return tok, nil
}

func (p *headerParser) fail(tensor, reason string) error {
	return &FormatError{File: p.file, Tensor: tensor, Reason: reason}
}

// validateLayout checks that each tensor's byte range matches its shape and
// lies in the data section, and that the ranges tile the section exactly:
// no gaps, no overlaps, nothing after the last tensor.
func validateLayout(file string, tensors []TensorInfo, dataLen int64) error {
	fail := func(tensor, format string, args ...any) error {
		return &FormatError{File: file, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
	}
	for _, t := range tensors {
		if t.Begin > t.End {
			return fail(t.Name, "data_offsets [%d, %d] are out of order", t.Begin, t.End)
		}
		if t.End > dataLen {
			return fail(t.Name, "data_offsets [%d, %d] run past the end of the file (data section is %d bytes)", t.Begin, t.End, dataLen)
		}
		want, err := byteLength(t.DType, t.Shape)
		if err != nil {
			return fail(t.Name, "%v", err)
		}
		if got := t.End - t.Begin; got != want {
			return fail(t.Name, "data_offsets [%d, %d] hold %d bytes, but shape %v of %s needs %d", t.Begin, t.End, got, t.Shape, t.DType, want)
		}
	}
	byOffset := slices.Clone(tensors)
	slices.SortFunc(byOffset, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return cmp.Compare(a.Begin, b.Begin)
		}
		return cmp.Compare(a.End, b.End)
	})
	var at int64
	prev := "the start of the data section"
	for _, t := range byOffset {
		if t.Begin > at {
			return fail(t.Name, "gap of %d bytes between %s and this tensor's data at %d", t.Begin-at, prev, t.Begin)
		}
		if t.Begin < at {
			return fail(t.Name, "data at [%d, %d] overlaps %s, which ends at %d", t.Begin, t.End, prev, at)
		}
		at, prev = t.End, fmt.Sprintf("tensor %q", t.Name)
	}
	if at != dataLen {
		return fail("", "%d trailing bytes after the last tensor's data", dataLen-at)
	}
	return nil
}
