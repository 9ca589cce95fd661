package cudadrv

import "fmt"

// FormatUUID writes a GPU's 16-byte UUID as nvidia-smi and
// CUDA_VISIBLE_DEVICES do: "GPU-" and 8-4-4-4-12 lower-case hex digits.
func FormatUUID(b [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
