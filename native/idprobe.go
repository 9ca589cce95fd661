package native

// #include "heterps_kernels.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// ints are 64 bits wide, so that ProbeIDs writes []int as C's int64_t.
var _ [unsafe.Sizeof(int(0)) - 8]struct{}

// ProbeIDs looks ids up in an open-addressing id map — len(keys) cells, a
// power of two, of keys and slots (slot+1; 0 marks an empty cell), id's
// first cell mix64(id ^ 0x9e3779b97f4a7c15) & (len-1) with splitmix64's
// finaliser, linear probing; a full map is searched once round — and writes each id's slot, or -1
// when it is absent, to out[:len(ids)]. It returns how many are absent.
// With row prefetching on (SetRowPrefetch) it asks for the cells of the ids
// a few ahead of the one it probes, since a big map's cells are cache
// misses. The caller keeps the map from changing during the call.
func ProbeIDs(keys []int64, slots []int32, ids []int64, out []int) (int, error) {
	switch {
	case len(keys) == 0 || len(keys)&(len(keys)-1) != 0:
		return 0, fmt.Errorf("probe ids: %d cells, want a power of two: %w", len(keys), ErrArg)
	case len(slots) != len(keys):
		return 0, fmt.Errorf("probe ids: %d slots for %d keys: %w", len(slots), len(keys), ErrArg)
	case len(out) < len(ids):
		return 0, fmt.Errorf("probe ids: out holds %d of %d ids: %w", len(out), len(ids), ErrArg)
	case len(ids) == 0:
		return 0, nil
	}
	n := C.hps_probe_ids(C.int64_t(len(keys)), iptr(keys), (*C.int32_t)(unsafe.Pointer(&slots[0])),
		C.int64_t(len(ids)), iptr(ids), (*C.int64_t)(unsafe.Pointer(&out[0])))
	return int(n), nil
}
