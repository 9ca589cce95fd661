package native

// #include "heterps_kernels.h"
import "C"

import (
	"fmt"
	"sync"
)

// EmbeddingBag pools rows of table [rows x dim] over the bags given in CSR
// form (bag j holds ids[offsets[j]:offsets[j+1]]) into out [bags x dim], by
// sum or mean; an empty bag gives zeros. Offsets must start at 0, never
// decrease and end at most at len(ids) (ErrArg, or ErrRange past the ids);
// every pooled id must be a row of the table (ErrRange). Nothing is written
// unless all of it holds.
//
// The bags are split into pieces of about 256 KiB of output, each piece one
// cgo call, run on the backend's threads.
func (b *CPU) EmbeddingBag(pool Pool, table Buffer, rows, dim int, offsets, ids []int64, out Buffer) error {
	if err := checkBagPool("embedding bag", pool); err != nil {
		return err
	}
	if rows < 0 || dim < 0 {
		return fmt.Errorf("embedding bag: negative table shape %d x %d: %w", rows, dim, ErrArg)
	}
	t, err := host("embedding bag: table", table, rows*dim)
	if err != nil {
		return err
	}
	nbags, err := checkBagOffsets("embedding bag", offsets, len(ids))
	if err != nil {
		return err
	}
	o, err := host("embedding bag: out", out, nbags*dim)
	if err != nil {
		return err
	}
	used := ids[:offsets[nbags]]
	for i, id := range used {
		if id < 0 || id >= int64(rows) {
			return fmt.Errorf("embedding bag: ids[%d] = %d outside the table's %d rows: %w", i, id, rows, ErrRange)
		}
	}
	// The kernel checks each piece again; a failure there is unreachable
	// after the checks above but is reported rather than ignored.
	var bad C.int64_t
	rc := C.hps_embbag_fwd_split(b.cisa(), C.hps_pool(pool), C.int64_t(rows), C.int64_t(dim), fptr(t),
		C.int64_t(nbags), iptr(offsets), iptr(used), fptr(o), C.int64_t(gatherGrain(nbags, dim, b.threads)),
		C.int(b.threads), &bad)
	if rc != C.HPS_OK {
		return hpsStatusError("embedding bag", rc, int64(bad))
	}
	return nil
}

// EmbeddingBagBackward turns dout [bags x dim], the gradient of
// EmbeddingBag's output, into the sparse gradient of the table: the distinct
// ids of ids[:offsets[bags]] in order of first occurrence, and for each one
// the sum over its occurrences of dout of its bag (scaled by 1/len for mean
// pooling). Duplicates inside a bag and across bags land in one row.
//
// It runs on one thread, in one cgo call after the hash pass that finds the
// distinct ids. Measured at 512 x 26 bags of 1..3 ids (26.7k ids, 8.4k
// distinct, dim 64, AVX-512): the scatter-add takes about 135 us alone and the
// hash pass about 90 us; splitting the scatter-add into column ranges made it
// slower (145 us with two ranges of 32 floats, 190+ us with 16), because every
// range walks all the ids again for a small share of each row. Most of the
// rest of the call (about 0.8 ms in all, on a loaded 2-core machine) is spent
// outside the kernels, allocating the result (BenchmarkEmbeddingBagBackward).
func (b *CPU) EmbeddingBagBackward(pool Pool, dim int, offsets, ids []int64, dout Buffer) (SparseRows, error) {
	if err := checkBagPool("embedding bag backward", pool); err != nil {
		return SparseRows{}, err
	}
	if dim < 0 {
		return SparseRows{}, fmt.Errorf("embedding bag backward: negative dim %d: %w", dim, ErrArg)
	}
	nbags, err := checkBagOffsets("embedding bag backward", offsets, len(ids))
	if err != nil {
		return SparseRows{}, err
	}
	d, err := host("embedding bag backward: dout", dout, nbags*dim)
	if err != nil {
		return SparseRows{}, err
	}
	uniq, index, ws := uniqueIDs(ids[:offsets[nbags]])
	defer putInt64s(ws)
	grad := make(HostBuffer, len(uniq)*dim)
	var bad C.int64_t
	rc := C.hps_embbag_bwd(b.cisa(), C.hps_pool(pool), C.int64_t(dim), C.int64_t(nbags),
		iptr(offsets), C.int64_t(len(index)), iptr(index), fptr(d), C.int64_t(len(uniq)),
		fptr(grad), &bad)
	if rc != C.HPS_OK {
		return SparseRows{}, hpsStatusError("embedding bag backward", rc, int64(bad))
	}
	return SparseRows{IDs: uniq, Dim: dim, Rows: grad}, nil
}

// uniqueIDs returns the distinct ids in order of first occurrence (a new
// slice of exactly that length) and, for each id, its position among them.
// index lives in ws, pooled memory that the caller returns with putInt64s
// when done with index.
func uniqueIDs(ids []int64) (uniq, index []int64, ws *[]int64) {
	n := len(ids)
	ws = getInt64s(2*n + uniqueScratchLen(n))
	tmp, index, scratch := (*ws)[:n], (*ws)[n:2*n], (*ws)[2*n:]
	count := C.hps_unique(C.int64_t(n), iptr(ids), iptr(tmp), iptr(index), iptr(scratch))
	uniq = make([]int64, count)
	copy(uniq, tmp)
	return uniq, index, ws
}

// uniqueScratchLen is the int64s of scratch hps_unique and
// hps_first_duplicate need for n ids.
func uniqueScratchLen(n int) int { return int(C.hps_unique_scratch_len(C.int64_t(n))) }

// firstDuplicateID returns the index of the first id equal to an earlier
// one, or -1 when all are distinct. Strictly ascending ids (a parameter
// server's slots, a batch's sorted rows) are distinct without the hash
// pass, whose scratch and cgo call cost more than the scan on the few
// rows a slab's run holds.
func firstDuplicateID(ids []int64) int {
	n := len(ids)
	if n < 2 || strictlyAscending(ids) {
		return -1
	}
	ws := getInt64s(uniqueScratchLen(n))
	defer putInt64s(ws)
	if at := int(C.hps_first_duplicate(C.int64_t(n), iptr(ids), iptr(*ws))); at < n {
		return at
	}
	return -1
}

func strictlyAscending(ids []int64) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}

// int64Pool recycles the hash passes' scratch. Allocating and zeroing it on
// every call took longer than the hash pass itself (the kernel initialises
// what it uses, so recycled memory needs no clearing).
var int64Pool sync.Pool

func getInt64s(n int) *[]int64 {
	if p, ok := int64Pool.Get().(*[]int64); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]int64, n)
	return &s
}

func putInt64s(p *[]int64) { int64Pool.Put(p) }

func checkBagPool(op string, pool Pool) error {
	if pool != PoolSum && pool != PoolMean {
		return fmt.Errorf("%s: unknown pooling %d: %w", op, int(pool), ErrArg)
	}
	return nil
}

// checkBagOffsets validates CSR offsets over nids ids and returns the number
// of bags.
func checkBagOffsets(op string, offsets []int64, nids int) (int, error) {
	if len(offsets) == 0 {
		return 0, fmt.Errorf("%s: no offsets (want bags+1, starting with 0): %w", op, ErrShape)
	}
	if offsets[0] != 0 {
		return 0, fmt.Errorf("%s: offsets[0] = %d, want 0: %w", op, offsets[0], ErrArg)
	}
	for j := 1; j < len(offsets); j++ {
		if offsets[j] < offsets[j-1] {
			return 0, fmt.Errorf("%s: offsets[%d] = %d is below offsets[%d] = %d: %w",
				op, j, offsets[j], j-1, offsets[j-1], ErrArg)
		}
		if offsets[j] > int64(nids) {
			return 0, fmt.Errorf("%s: offsets[%d] = %d is past the %d ids: %w", op, j, offsets[j], nids, ErrRange)
		}
	}
	return len(offsets) - 1, nil
}

// hpsStatusError turns a C status into an error that wraps the matching
// sentinel.
func hpsStatusError(op string, rc C.int, bad int64) error {
	switch rc {
	case C.HPS_ERANGE:
		return fmt.Errorf("%s: kernel: index %d out of range: %w", op, bad, ErrRange)
	case C.HPS_EORDER:
		return fmt.Errorf("%s: kernel: bad offset at %d: %w", op, bad, ErrArg)
	default:
		return fmt.Errorf("%s: kernel: status %d: %w", op, int(rc), ErrArg)
	}
}

// rawEmbbagFwd and rawEmbbagBwd call the kernels without the Go checks
// above, so that tests can check the kernels' own validation, which guards
// the memory even if a caller's checks are wrong. They return the
// reported index and the kernel's status as an error (nil for HPS_OK).
func rawEmbbagFwd(isa ISA, pool Pool, rows, dim int, table []float32, offsets []int64, nids int,
	ids []int64, out []float32) (int64, error) {
	var bad C.int64_t = -1
	rc := C.hps_embbag_fwd(C.hps_isa(isa), C.hps_pool(pool), C.int64_t(rows), C.int64_t(dim), fptr(table),
		C.int64_t(len(offsets)-1), iptr(offsets), C.int64_t(nids), iptr(ids), fptr(out), &bad)
	return rawStatus(rc, bad)
}

func rawEmbbagBwd(isa ISA, pool Pool, dim int, offsets []int64, nids int, index []int64,
	dout []float32, nuniq int, grad []float32) (int64, error) {
	var bad C.int64_t = -1
	rc := C.hps_embbag_bwd(C.hps_isa(isa), C.hps_pool(pool), C.int64_t(dim), C.int64_t(len(offsets)-1),
		iptr(offsets), C.int64_t(nids), iptr(index), fptr(dout), C.int64_t(nuniq), fptr(grad), &bad)
	return rawStatus(rc, bad)
}

func rawStatus(rc C.int, bad C.int64_t) (int64, error) {
	if rc == C.HPS_OK {
		return int64(bad), nil
	}
	return int64(bad), hpsStatusError("kernel", rc, int64(bad))
}

// SetRowPrefetch turns the sparse-row kernels' prefetching on (the default)
// or off: the embedding-bag forward and UpdateRows ask for the rows a few
// ids ahead of the one they work on. It is for benchmarks that measure what
// prefetching buys; call it while no kernel runs.
func SetRowPrefetch(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.hps_set_row_prefetch(v)
}
