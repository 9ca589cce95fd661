package data

import (
	"math"
	"strconv"
)

// parseNumber parses a finite decimal number.
func parseNumber(b []byte) (float64, bool) {
	v, err := strconv.ParseFloat(string(b), 64)
	return v, err == nil && !math.IsInf(v, 0) && !math.IsNaN(v)
}

// isHeaderField reports whether the first field of a file's first line names
// a column instead of holding a value: it is not empty and not a number.
func isHeaderField(b []byte) bool {
	_, ok := parseNumber(b)
	return len(b) > 0 && !ok
}

// clickLabel parses a 0/1 label ("0", "1", "0.0", "1.0", ...).
func clickLabel(field string, b []byte) (float32, *fieldError) {
	v, ok := parseNumber(b)
	if !ok || (v != 0 && v != 1) {
		return 0, badField(field, "label %q is not 0 or 1", b)
	}
	return float32(v), nil
}

// countFeature turns an integer feature into log(1+x): empty is 0, negative
// values are clamped to 0. Integral values written as floats ("260.0", as in
// the Criteo CSV) are accepted, and so is any other finite number.
func countFeature(field string, b []byte) (float32, *fieldError) {
	if len(b) == 0 {
		return 0, nil
	}
	v, ok := parseNumber(b)
	if !ok {
		return 0, badField(field, "%q is not a number", b)
	}
	return float32(math.Log1p(max(v, 0))), nil
}

// isHexID reports whether b is 1 to 16 hexadecimal digits.
func isHexID(b []byte) bool {
	if len(b) == 0 || len(b) > 16 {
		return false
	}
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// columnNames returns prefix1 .. prefixN.
func columnNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i+1)
	}
	return names
}
