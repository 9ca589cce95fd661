package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes in a config file: an integer, or a string
// of a number and a unit, "4GiB", "512 MiB", "2GB" (KiB, MiB, GiB, TiB are
// powers of 1024; KB, MB, GB, TB of 1000; B or none is bytes).
type ByteSize int64

var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// UnmarshalText parses the string form.
func (b *ByteSize) UnmarshalText(text []byte) error {
	n, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = n
	return nil
}

// ParseByteSize parses "4GiB", "512 MiB", "1000" and the like.
func ParseByteSize(s string) (ByteSize, error) {
	num, factor := strings.TrimSpace(s), int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = strings.TrimSpace(rest), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a byte size (an integer, or one with a unit such as 4GiB or 512MiB)", s)
	}
	if n > math.MaxInt64/factor {
		return 0, fmt.Errorf("%q is more bytes than fit in 63 bits", s)
	}
	return ByteSize(n * factor), nil
}
