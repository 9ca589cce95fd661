package data

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// Prefetcher produces items ahead of their use on a goroutine of its own,
// so that preparing the next batch overlaps the step that trains on this
// one. Items come out in the order next produced them; the error that
// ended the reading (io.EOF at the end of the stream) comes after every
// item read before it, and again on every later call. Whoever opens a
// Prefetcher closes it (Close stops and waits for its goroutine) before
// closing what next reads from.
type Prefetcher[T any] struct {
	items   chan fetched[T]
	ctx     context.Context // the reader's; Close cancels it
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	limited bool  // the reader stopped at its limit (set before items is closed)
	end     error // the error that ended the stream, once Next has seen it
}

type fetched[T any] struct {
	v   T
	err error
}

// Prefetch starts calling next, at most depth items ahead of Next, and
// at most limit times (limit <= 0: until next fails). next gets a context
// that ends when ctx does or Close is called.
func Prefetch[T any](ctx context.Context, depth, limit int, next func(context.Context) (T, error)) (*Prefetcher[T], error) {
	if depth < 1 {
		return nil, fmt.Errorf("data: prefetch depth %d, want >= 1", depth)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Prefetcher[T]{items: make(chan fetched[T], depth), ctx: ctx, cancel: cancel}
	p.wg.Go(func() { p.read(ctx, limit, next) })
	return p, nil
}

// read runs on the prefetching goroutine.
func (p *Prefetcher[T]) read(ctx context.Context, limit int, next func(context.Context) (T, error)) {
	defer close(p.items)
	for n := 0; ; n++ {
		if limit > 0 && n == limit {
			p.limited = true
			return
		}
		v, err := next(ctx)
		select {
		case p.items <- fetched[T]{v, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// Next returns the next item, or the error that ended the stream: io.EOF
// after limit items, next's own error, or the context's when it ended
// (either Prefetch's or ctx).
func (p *Prefetcher[T]) Next(ctx context.Context) (T, error) {
	var zero T
	if p.end != nil {
		return zero, p.end
	}
	select {
	case f, ok := <-p.items:
		switch {
		case !ok && p.limited:
			p.end = io.EOF
		case !ok:
			p.end = fmt.Errorf("data: prefetch stopped: %w", p.ctx.Err())
		case f.err != nil:
			p.end = f.err
		default:
			return f.v, nil
		}
		return zero, p.end
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Close stops the prefetching goroutine and waits until it has returned,
// so that what next reads may be closed after it. It is safe to call more
// than once.
func (p *Prefetcher[T]) Close() {
	p.cancel()
	p.wg.Wait()
}

// PrefetchBatches reads batches of size from src, depth ahead, at most
// limit of them (limit <= 0: until the source ends).
func PrefetchBatches(ctx context.Context, src Source, size, depth, limit int) (*Prefetcher[*Batch], error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	return Prefetch(ctx, depth, limit, func(ctx context.Context) (*Batch, error) { return src.Next(ctx, size) })
}
