package data

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// BatchSkipper is a source that can pass over batches without decoding
// their records: a reader resuming where a restored job had got to.
type BatchSkipper interface {
	// SkipBatches passes over the next n batches of size records, from
	// the start of the stream, exactly as n calls of Next(ctx, size) would
	// (a pass's last batch may be short), without decoding them.
	SkipBatches(ctx context.Context, n int64, size int) error
}

// SkipBatches passes over the first n batches of size of src: without
// decoding them where src can (BatchSkipper), else by reading them. A
// resumed run calls it to see the data in the order an uninterrupted run
// does.
func SkipBatches(ctx context.Context, src Source, n int64, size int) error {
	if sk, ok := src.(BatchSkipper); ok {
		return sk.SkipBatches(ctx, n, size)
	}
	for range n {
		if _, err := src.Next(ctx, size); err != nil {
			return err
		}
	}
	return nil
}

// errNoSkip: the source cannot skip without decoding (it skips and counts
// malformed lines, which only decoding finds).
var errNoSkip = errors.New("data: this source cannot skip without decoding")

// skipRecords passes over the next k records this worker keeps without
// decoding them, and returns how many it passed over: fewer than k at the
// end of the file. A source that skips malformed lines cannot (errNoSkip):
// they are not records, and only decoding tells them.
func (s *fileSource) skipRecords(ctx context.Context, k int64) (int64, error) {
	if s.opts.SkipBadLines {
		return 0, errNoSkip
	}
	if s.err != nil {
		return 0, s.err
	}
	stop := s.lines.watch(ctx)
	defer stop()
	var got int64
	jumped := false
	for n := 0; got < k; n++ {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return got, err
			}
		}
		if !jumped && s.started && s.jumpTo == 0 && s.index != nil { // after the first record's move (jumpTo)
			jumped = true
			passed, err := s.skipByMarks(k - got)
			if err != nil {
				s.err = err
				return got, err
			}
			if got += passed; got == k {
				return got, nil
			}
		}
		_, kept, err := s.readRecord() // undecoded
		if err != nil {
			s.err = err
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			return got, err
		}
		if kept {
			got++
		}
	}
	return got, nil
}

// skipByMarks passes over as many of the next left records this worker
// keeps as it can by moving to a mark (index.go): the furthest at or
// before the last of them, or the furthest noted when they reach beyond it
// (another pass, say). It returns how many it passed over, those below the
// mark, counted by the selection rules in one walk over the records up to
// the mark at most, however many passes left spans. It passes over none
// where no mark lies ahead, the stream has a Limit (the marks may lie
// beyond it) or the file no longer agrees with the mark.
func (s *fileSource) skipByMarks(left int64) (int64, error) {
	if s.opts.Limit > 0 {
		return 0, nil
	}
	last, ok := s.index.last()
	if !ok || last*indexEvery <= s.next {
		return 0, nil
	}
	o := s.opts
	o.Start = max(o.Start, s.next)
	j, below := o.markBefore(left, last)
	if j*indexEvery <= s.next {
		return 0, nil
	}
	_, m, _ := s.index.before(j * indexEvery)
	if moved, err := s.moveTo(j, m); !moved || err != nil {
		return 0, err
	}
	return below, nil
}

// markBefore walks the records from Start that these options keep, up to
// the left-th of them or up to mark last, and returns the furthest mark
// at or before the last record walked and how many kept records lie below
// it.
func (o Options) markBefore(left, last int64) (j, below int64) {
	k := max(int64(o.Shards), 1)
	n := int64(0)
	for i := o.Start + ((int64(o.Shard)-o.Start)%k+k)%k; i < last*indexEvery; i += k {
		if m := i / indexEvery; m > j { // no kept record lies between the mark and i
			j, below = m, n
		}
		if o.keeps(i) {
			if n++; n == left {
				return j, below
			}
		}
	}
	return last, n
}

// SkipBatches passes over n batches of size from the start of the stream
// (BatchSkipper) without decoding a record: it reads the first pass to its
// end when n reaches that far, which tells how many batches a pass holds,
// and then only the batches left of the last pass (n modulo that count),
// so that no more than two passes' lines are read whatever n is. Each
// pass begun calls onEpoch. A pass holds ceil(records / size) batches, its
// last short, as Next makes them. A source that cannot skip without
// decoding reads the batches with Next.
func (r *repeating) SkipBatches(ctx context.Context, n int64, size int) error {
	if err := checkSize(size); err != nil {
		return err
	}
	perPass := int64(0) // batches in a pass, once one has been read whole
	for n > 0 {
		if r.cur == nil {
			return errors.New("data: repeat: the source could not be reopened")
		}
		fs, ok := r.cur.(*fileSource)
		if !ok {
			return r.decodeBatches(ctx, n, size)
		}
		if passes := n / max(perPass, 1); perPass > 0 && passes > 0 { // whole passes: nothing to read
			r.passOver(passes)
			n %= perPass
		}
		want := n * int64(size)
		got, err := fs.skipRecords(ctx, want)
		if errors.Is(err, errNoSkip) {
			return r.decodeBatches(ctx, n, size)
		}
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		if got == 0 {
			return fmt.Errorf("data: repeat: a pass of %s holds no records of this worker", fs.name)
		}
		perPass = (got + int64(size) - 1) / int64(size) // the pass ended: it was read from its start
		n -= perPass
		if err := r.nextPass(); err != nil {
			return err
		}
	}
	return nil
}

// decodeBatches reads and drops n batches of size, decoding them (a
// source that skips malformed lines, which only decoding tells, or one that
// is not a file): the first pass whole when n reaches past it, which tells
// how many batches a pass holds — every pass skips the same lines — and
// then only the batches left of the last pass, as SkipBatches does without
// decoding; a stream that never ends a pass is read batch by batch.
func (r *repeating) decodeBatches(ctx context.Context, n int64, size int) error {
	first := r.epoch
	for read := int64(0); read < n; read++ {
		if _, err := r.Next(ctx, size); err != nil {
			return err
		}
		if r.epoch == first+1 && read > 0 && first > 0 { // this batch began the second pass: read batches made the first
			perPass := read
			if whole := (n - read - 1) / perPass; whole > 0 {
				r.passOver(whole)
				n -= whole * perPass
			}
			first = 0 // counted
		}
	}
	return nil
}

// passOver counts passes passes as read, calling onEpoch with the pass the
// reader is then in.
func (r *repeating) passOver(passes int64) {
	r.epoch += int(passes)
	if r.onEpoch != nil {
		r.onEpoch(r.epoch)
	}
}
