package pipeline

import "context"

// Recursive halving and doubling (Rabenseifner's allreduce), for rings of
// 2^d members, d >= 2. Reduce-scatter takes d rounds: in the round of
// mask m (n/2, then n/4, ..., 1) the member at place p and its partner
// p^m share the chunks both still hold; each keeps one half (the lower
// where its bit m is clear), sends the other to the partner, and adds
// what the partner sends to the half it keeps. After the last round the
// member at place p holds chunk p summed over the ring. Allgather retraces
// the rounds from m = 1: each member sends everything it holds and takes
// its partner's as it comes, copied byte for byte. Every member sends the
// ring's bytes, 2(n-1)/n of the gradient, in 2d messages (and pieces)
// instead of 2(n-1), and a chunk is finished d hops after backward hands
// it over instead of n-1: for four replicas 4 rounds instead of 6, for
// eight 6 instead of 14. Which partial sums are added together follows
// the places' bits alone, so the bytes depend on the membership, never on
// the timing, and the weighting is the ring's, but for the first round:
// there a member sends its gradient as it is and the receiver weighs both
// its own and the partner's by their rows as it adds them (in one pass);
// the owner weighs the last addition by 1/Σb.

// halving reports whether a ring of n members reduces a gradient of
// floats floats by halving and doubling rather than by passing chunks
// around: where n is a power of two from 4 and the gradient is at most
// halvingMaxFloats. Larger gradients stay on the ring, which streams each
// chunk on piece by piece while halving exchanges whole halves a round at
// a time (pipeline.BenchmarkDenseSync on the 2-core VM, 4 and 8 members in
// one process: halving ahead by a quarter at 64-256 KiB with 8, even at
// 1 MiB with 4, behind by a fifth to two thirds at 4 MiB).
func halving(n, floats int) bool {
	return halvingOn && n >= 4 && n&(n-1) == 0 && floats <= halvingMaxFloats
}

// halvingMaxFloats is the largest gradient halving reduces: one whose
// halves each travel as one piece.
const halvingMaxFloats = 2 * ringPiece

// halvingOn is false only where tests and benchmarks compare the ring.
var halvingOn = true

// halvingRound numbers halving's rounds apart from the ring's (below
// 2(n-1)) and the swap's: members that chose differently fail the step.
const halvingRound = 1 << 29

// halvingRounds reports whether a message's round is one of halving's.
func halvingRounds(round uint64) bool { return round >= halvingRound && round < swapRound }

// halveAndDouble is reduce for a ring of halving size.
func (r *ring) halveAndDouble(ctx context.Context, param int, g []float32, rows int, u *ownerUpdate) error {
	n, p := len(r.members), r.pos
	bounds := chunks(len(g), n)
	// part is the m chunks from place rounded down to a multiple of m:
	// what the member at place holds after the round of mask m.
	part := func(buf []float32, place, m int) []float32 {
		first := place &^ (m - 1)
		return buf[bounds[first]:bounds[first+m]]
	}
	gathered := g
	if u != nil {
		gathered = u.w
	}
	var toFirst *ringExchange // this owner's updated state, for the mirror
	if u != nil && u.snapshot && p != 0 {
		toFirst = r.exchange(ctx, param, 0, 0, mirrorStream)
	}
	fb := float32(rows)
	held, total, round := rows, 0, halvingRound
	for m := n / 2; m >= 1; m /= 2 {
		q := p ^ m
		x := r.exchange(ctx, param, q, q, ringStream)
		out, kept := part(g, q, m), part(g, p, m)
		first, last := m == n/2, m == 1
		// own is the factor of what this member already holds: its rows in
		// the first round, where both partners send their gradients as they
		// are and each weighs the other's by its rows as it adds them (one
		// pass, where weighing before sending took one more), then 1.
		own := float32(1)
		if first {
			own = fb
		}
		for j, piece := range pieces(out) {
			if err := x.send(round, j, piece, held); err != nil {
				return err
			}
		}
		got := 0
		for j, piece := range pieces(kept) {
			came, sum, err := x.addIn(round, j, piece, own, first, held, last)
			if err != nil {
				return err
			}
			got = came
			if last {
				total = sum
			}
			if last && u != nil {
				if err := u.finish(toFirst, j, bounds[p]+j*ringPiece, len(piece), total); err != nil {
					return err
				}
			}
		}
		held += got
		round++
	}
	for m := 1; m < n; m *= 2 {
		q := p ^ m
		x := r.exchange(ctx, param, q, q, ringStream)
		for j, piece := range pieces(part(gathered, p, m)) {
			if err := x.send(round, j, piece, total); err != nil {
				return err
			}
		}
		for j, piece := range pieces(part(gathered, q, m)) {
			if _, err := x.recv(round, j, len(piece), func(v []float32, _ int) error { copy(piece, v); return nil }); err != nil {
				return err
			}
		}
		round++
	}
	return r.collectStates(ctx, param, u, bounds)
}
