package errlines

import (
	"bytes"
	"errors"
	"testing"
)

func TestPrintPrefixesEveryLine(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("one"), "cmd: one\n"},
		{errors.Join(errors.New("a.toml:1:1: x: bad"), errors.New("a.toml:2:1: y: worse")), "cmd: a.toml:1:1: x: bad\ncmd: a.toml:2:1: y: worse\n"},
		{errors.New("ends with a newline\n"), "cmd: ends with a newline\n"},
	} {
		var b bytes.Buffer
		Print(&b, "cmd", tc.err)
		if b.String() != tc.want {
			t.Errorf("%q: printed %q, want %q", tc.err, b.String(), tc.want)
		}
	}
}
