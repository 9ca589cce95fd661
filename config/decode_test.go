package config

import (
	"errors"
	"strings"
	"testing"
)

type testDoc struct {
	Batch int `toml:"batch"`
	Layer []struct {
		Name string    `toml:"name"`
		Oct  []float64 `toml:"oct"`
	} `toml:"layer"`
}

const testSrc = `batch = 4
# comment
[[layer]]
name = "a"
oct = [1.0]

[[layer]]
name = "b"
  oct = [2.0, 3.0]
`

func TestDecodeUnknownKeyNamesLineAndField(t *testing.T) {
	var d testDoc
	err := Decode("p.toml", []byte("batch = 4\nbatchh = 5\n"), &d)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *Error, got %v", err)
	}
	if ce.Line != 2 || ce.Field != "batchh" || !strings.Contains(err.Error(), "p.toml:2") {
		t.Fatalf("got %+v (%v)", ce, err)
	}
}

func TestDecodeTypeMismatchHasPosition(t *testing.T) {
	var d testDoc
	err := Decode("p.toml", []byte("\nbatch = \"four\"\n"), &d)
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 2 {
		t.Fatalf("want line 2, got %v", err)
	}
}

func TestDecodeSyntaxError(t *testing.T) {
	var d testDoc
	err := Decode("p.toml", []byte("batch = 4\n[[layer]\n"), &d)
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 2 {
		t.Fatalf("want line 2, got %v", err)
	}
}

func TestLocatorFindsArrayTableKeys(t *testing.T) {
	var d testDoc
	if err := Decode("p.toml", []byte(testSrc), &d); err != nil {
		t.Fatal(err)
	}
	loc := NewLocator("p.toml", []byte(testSrc))
	cases := []struct {
		field     string
		line, col int
	}{
		{"batch", 1, 1},
		{"layer[0].oct", 5, 1},
		{"layer[1].oct", 9, 3},
		{"layer[1].name", 8, 1},
		{"layer[1]", 7, 1},
		{"layer[1].missing", 7, 0},
		{"layer[5].oct", 0, 0},
	}
	for _, c := range cases {
		e := loc.Errorf(c.field, "bad")
		if e.Line != c.line || e.Col != c.col {
			t.Errorf("%s: got %d:%d, want %d:%d", c.field, e.Line, e.Col, c.line, c.col)
		}
	}
	if got := loc.Errorf("layer[1].oct", "has %d values", 2).Error(); got != "p.toml:9:3: layer[1].oct: has 2 values" {
		t.Errorf("message %q", got)
	}
}
