package place

import (
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
)

func TestBuiltInDevicesLoad(t *testing.T) {
	names := config.ExampleNames(ExampleDevices)
	if len(names) < 4 {
		t.Fatalf("built-in devices files: %v", names)
	}
	for _, n := range names {
		d, err := LoadDevices(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Devices) < 2 || len(d.Devices) > 5 || d.Devices[0].LaunchLatency == 0 {
			t.Errorf("%s: %+v", n, d)
		}
	}
}

func TestBadDevicesFilesNameTheLine(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"version = 1\n[[device]]\nname = \"a\"\nkind = \"tpu\"\n", "x.toml:4:1: device[0].kind: unknown kind"},
		{"[[device]]\nname = \"a\"\nkind = \"cpu\"\npeak_flops = 1e12\nmem_bandwidth = 1e9\nmemory = \"1GiB\"\nlink_bandwidth = 0\n", "x.toml:7:1: device[0].link_bandwidth: must be > 0"},
		{"[[device]]\nname = \"a\"\nkind = \"cpu\"\nflops = 1\n", "x.toml:4:1: device.flops: unknown key"},
		{"version = 1\n", "device: want 1..64"},
	} {
		_, err := ParseDevices("x.toml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.src, err, c.want)
		}
	}
}
