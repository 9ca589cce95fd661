package cudadrv

import "testing"

// The form nvidia-smi -L prints, byte for byte.
func TestFormatUUID(t *testing.T) {
	b := [16]byte{0x8c, 0x6a, 0x0f, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x02, 0x03, 0x04, 0xff}
	if got, want := FormatUUID(b), "GPU-8c6a0f12-3456-789a-bcde-f001020304ff"; got != want {
		t.Errorf("FormatUUID = %q, want %q", got, want)
	}
}
