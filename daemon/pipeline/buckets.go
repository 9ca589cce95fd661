package pipeline

import (
	"fmt"
	"slices"

	"github.com/heterps/heterps/native"
)

// Fused reductions. Each ring reduction costs its members a few messages
// and wake-ups whatever its size, and a model's small dense parameters
// (biases, narrow layers: ctrdnn has seven below 5,000 floats beside three
// of 30,000 to 130,000) would each pay that. So parameters of at most
// fuseFloats floats are reduced together in buckets, as DDP's buckets and
// Horovod's tensor fusion do: their gradients concatenated, one reduction,
// the optimiser run over the concatenation (every optimiser here is
// elementwise, with one schedule for all dense parameters: a pair of
// replicas gets the bits of reductions alone, a ring of three or more sums
// an element in another member order where its chunk now starts elsewhere,
// the same on every member). Buckets fill in backward order and close once they hold
// fuseFloats floats; a bucket is reduced once backward has finished the
// gradients of every layer it holds parameters of — in whatever order
// (a CPU backend of one thread computes the weight gradients from the
// first layer up, two threads from the last down) — and the next step's
// forward through any of its layers waits for it. Larger parameters are
// reduced alone as soon as backward leaves their layer.

// fuseFloats bounds the parameters fused into buckets and each bucket's
// floats (64 KiB); a variable so that tests can turn fusion off (0).
var fuseFloats = 1 << 14

// bucket is dense parameters reduced as one.
type bucket struct {
	params []int // indices into the stage's dense parameters
	offs   []int // where each one starts in the concatenation; offs[len(params)] is its length
	layers []int // every layer its members belong to, in backward order
}

// fused reports whether b concatenates several parameters.
func (b *bucket) fused() bool { return len(b.params) > 1 }

// fuseBuckets groups dense parameters of lengths lens, of layers layers
// (ascending, as the stage lists them), into buckets in backward order.
func fuseBuckets(lens, layers []int) []bucket {
	var out []bucket
	var open *bucket
	add := func(b *bucket, i int) {
		if len(b.offs) == 0 {
			b.offs = []int{0}
		}
		b.params = append(b.params, i)
		b.offs = append(b.offs, b.offs[len(b.offs)-1]+lens[i])
		if len(b.layers) == 0 || b.layers[len(b.layers)-1] != layers[i] {
			b.layers = append(b.layers, layers[i])
		}
	}
	for i := len(lens) - 1; i >= 0; i-- {
		if lens[i] > fuseFloats {
			out = append(out, bucket{})
			add(&out[len(out)-1], i)
			continue
		}
		if open == nil {
			open = &bucket{}
		}
		add(open, i)
		if open.offs[len(open.offs)-1] >= fuseFloats {
			out = append(out, *open)
			open = nil
		}
	}
	if open != nil {
		out = append(out, *open)
	}
	return out
}

// reduceBucket reduces and applies the fused bucket b: its members'
// gradients concatenated, one ring reduction, the optimiser over the
// concatenation (sharded like a parameter's: bucketUpdate), then each
// member's share copied back.
func (w *Worker) reduceBucket(st *stepState, r *ring, b *bucket) error {
	dense := w.copies[0].dense
	g := make([]float32, b.offs[len(b.params)])
	for k, i := range b.params {
		gi, err := w.denseGradient(i)
		if err != nil {
			return err
		}
		copy(g[b.offs[k]:b.offs[k+1]], gi[:dense[i].Len()])
	}
	optim := w.local.optim.At(st.step)
	u, scatter := w.bucketUpdate(r, b, g, optim, w.local.assigns(st.step))
	if err := r.reduce(st.bgCtx, b.params[0], g, st.res.Samples, u); err != nil {
		return fmt.Errorf("%s and %d more: %w", dense[b.params[0]].Name, len(b.params)-1, err)
	}
	if u != nil {
		scatter()
	}
	for k, i := range b.params {
		if err := w.finishDense(st, r, i, g[b.offs[k]:b.offs[k+1]], optim, u != nil); err != nil {
			return err
		}
	}
	return nil
}

// bucketUpdate is ownerUpdate for a fused bucket: the members' values and
// optimiser state gathered into concatenations the ring's owners update
// and pass on, and scatter, which copies them back once the reduction is
// done. nil where every member applies the whole step.
func (w *Worker) bucketUpdate(r *ring, b *bucket, g []float32, optim native.Optim, snapshot bool) (*ownerUpdate, func()) {
	if !w.local.shard || len(r.members) == 1 {
		return nil, nil
	}
	n := b.offs[len(b.params)]
	val := make(native.HostBuffer, n)
	state := make([]native.HostBuffer, len(w.local.state[b.params[0]]))
	for s := range state {
		state[s] = make(native.HostBuffer, n)
	}
	each := func(f func(i, lo, hi int)) {
		for k, i := range b.params {
			f(i, b.offs[k], b.offs[k+1])
		}
	}
	dense := w.copies[0].dense
	each(func(i, lo, hi int) {
		copy(val[lo:hi], dense[i].Value.(native.HostBuffer)) // shardable checked them
		for s, buf := range w.local.state[i] {
			copy(state[s][lo:hi], buf.(native.HostBuffer))
		}
	})
	return w.shardedUpdate(val, state, g, optim, snapshot), func() {
		each(func(i, lo, hi int) {
			copy(dense[i].Value.(native.HostBuffer), val[lo:hi])
			for s, buf := range w.local.state[i] {
				copy(buf.(native.HostBuffer), state[s][lo:hi])
			}
		})
	}
}

// bucketsDone returns the buckets whose gradients backward has now
// finished, layer being the one it has just left: every layer of each
// (st.bucketLeft counts them down).
func (st *stepState) bucketsDone(buckets []bucket, layer int) []int {
	if st.bucketLeft == nil {
		st.bucketLeft = make([]int, len(buckets))
		for k, b := range buckets {
			st.bucketLeft[k] = len(b.layers)
		}
	}
	var done []int
	for k, b := range buckets {
		if slices.Contains(b.layers, layer) {
			if st.bucketLeft[k]--; st.bucketLeft[k] == 0 {
				done = append(done, k)
			}
		}
	}
	return done
}

// startBucket runs reduce, fused bucket b's reduction, on st.bg, and
// registers under each of b's layers a channel it closes once the
// reduction is in: the next step's forward through any of them waits for
// it (stepTail.waitLayer).
func (w *Worker) startBucket(st *stepState, b *bucket, reduce func() error) {
	done := make(chan struct{})
	for _, l := range b.layers {
		st.covers[l] = append(st.covers[l], done)
	}
	if st.inline {
		st.queueInline([]func() error{reduce}, func() { close(done) })
		return
	}
	st.bg.Go(func() error {
		if err := reduce(); err != nil {
			return err
		}
		close(done)
		return nil
	})
}
