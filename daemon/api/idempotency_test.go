package api

import (
	"strings"
	"testing"
)

func TestCheckIdempotencyKey(t *testing.T) {
	for _, k := range []string{NewIdempotencyKey(), strings.Repeat("a", 16), strings.Repeat("Z9_-", 32)} {
		if err := CheckIdempotencyKey(k); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
	for k, want := range map[string]string{
		strings.Repeat("a", 15):  "15 characters",
		strings.Repeat("a", 129): "129 characters",
		"0123456789abcdef.":      "character 17",
		"0123456789 abcdef":      "character 11",
		"":                       "0 characters",
	} {
		err := CheckIdempotencyKey(k)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", k, err, want)
		}
	}
}

func TestNewIdempotencyKeysDiffer(t *testing.T) {
	a, b := NewIdempotencyKey(), NewIdempotencyKey()
	if a == b || len(a) != 32 {
		t.Errorf("keys %q and %q: want two distinct 32-digit ones", a, b)
	}
}
