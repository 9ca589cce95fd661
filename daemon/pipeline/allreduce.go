package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

// Dense synchronisation by allreduce. With Config.Allreduce set, the
// replicas of a data-parallel stage keep their dense parameters themselves:
// as backward leaves a layer, each of its dense gradients is reduced among
// the stage's members for the step by a ring allreduce over the wire
// transport, and every replica applies the model's optimiser to its own
// copy with the reduced gradient. Sparse rows stay on the parameter
// servers.
//
// The ring is the step's members in ascending replica order. A gradient of
// L floats is cut into n chunks (chunks(L, n)); reduce-scatter passes
// chunk c around the ring starting at member c, each member adding its own
// part to what it received, so that member c-1 (mod n) ends with the sum
// over the ring in a fixed order; allgather then passes every finished
// chunk on, copied byte for byte. Every member thus holds the same bytes,
// and the order of the additions depends on the membership alone, never
// on timing. A chunk travels as messages of at most ringPiece floats,
// passed on piece by piece as they arrive (the ring is pipelined within a
// chunk), each with the ring's members: a replica whose predecessor saw
// other members for the step (a resize that reached them at different
// steps) fails the step rather than mix two rings.
//
// A ring of two swaps instead (ring.swap): each member sends its whole
// gradient to the other, and both sum the pair in member order; with the
// optimiser sharded and one member relieved (Allreduce.Relieve: its node
// also serves parameter-server shards), the other sums, updates and sends
// the new values back instead (ring.reduceOnOne). Rings of
// 4, 8, 16 ... members reduce small gradients by recursive halving and
// doubling (halving.go).
//
// The sum is weighted as the parameter servers weigh pushes: member k
// multiplies its gradient by its rows b_k before adding it, the messages
// carry the rows summed so far (Meta.Batch), and the owner of a finished
// chunk weighs it by 1/Σb, so that variable batches stay exact.
// A stage of one member skips all of it: its gradient is used as it is,
// bit for bit as single-process training uses it.

// Allreduce is what a worker needs to reduce its stage's dense gradients
// among the stage's replicas.
type Allreduce struct {
	Transport wire.Transport
	// Peers[r] is the transport node id of replica r of the stage.
	Peers []string
	// TotalSteps is the job's step count that PSParams was given: the
	// learning-rate schedule's length.
	TotalSteps int64
	// Mirror, if set, reaches the parameter servers as replica 0 of the
	// stage's MirrorStage, for the job's checkpoints: at every
	// CheckpointEvery-th and CheckpointGrid-th step and the last
	// (TotalSteps), the ring's first
	// member assigns each dense block there its values and optimiser state
	// after the step (ps AssignBlock), which the servers' checkpoint of
	// the step then holds. Between those steps the servers' blocks keep
	// the last assignment (or their starting values).
	Mirror *ps.Client
	// CheckpointEvery is the job's checkpoint interval in steps, and
	// CheckpointGrid the spacing of the further steps the Mirror assigns
	// at, so that a checkpoint asked for while the job runs can be taken
	// at the next of them (api.Task.CheckpointGrid); 0 for none. A Mirror
	// needs one of them >= 1.
	CheckpointEvery int64
	CheckpointGrid  int64
	// ShardOptimiser makes each member run the optimiser on its own chunk
	// of every dense parameter (the chunk its reduce-scatter finishes) and
	// the allgather pass on updated values instead of gradients: the same
	// bits as every member updating everything, for 1/n of the optimiser's
	// work and memory traffic; at a Mirror's steps the other members also
	// send the optimiser state of their chunks to the first, which assigns
	// it whole. Its ring cannot change members (Resize refuses), and it is
	// ignored with parameters outside host memory. A ring of two shards
	// only where its members' kernels differ (ring.swap).
	ShardOptimiser bool
	// Relieve lists the replicas whose node also hosts a parameter-server
	// shard of the job. In a ring of two with the optimiser sharded, where
	// exactly one member is listed, the other sums the pair and updates
	// alone and sends the new values back (ring.reduceOnOne): the listed
	// one, which also serves the other's rows, neither sums nor updates.
	Relieve []int
}

// ringPiece bounds the floats one ring message carries (256 KiB).
const ringPiece = 1 << 16

// Bounds of the ring's stream numbering (ringStream).
const (
	maxRingStages = 1 << 8
	maxRingParams = 1 << 10
)

// ringStream is the stream replica from sends the pieces of dense
// parameter param of stage to its successor on the ring. Bit 31 keeps it
// apart from EdgeStream and the greeting streams, bit 28 from RingLinks'.
func ringStream(stage, from, param int) uint32 {
	return 1<<31 | 1<<28 | uint32(stage)<<20 | uint32(from)<<10 | uint32(param)
}

// mirrorStream is the stream replica from sends the optimiser state of its
// chunk of dense parameter param to the ring's first member on, for the
// mirror (ownerUpdate.snapshot); bits 29 and 28 keep it apart from
// ringStream and from the greetings.
func mirrorStream(stage, from, param int) uint32 { return ringStream(stage, from, param) | 1<<29 }

// RingLinks returns a link to every other replica of the stage (peers as
// in Allreduce.Peers), for greeting them before the first step: every
// pair gets one stream, the same at both ends.
func RingLinks(t wire.Transport, stage, replica int, peers []string) []Link {
	var out []Link
	for r, p := range peers {
		if r == replica {
			continue
		}
		lo, hi := min(r, replica), max(r, replica)
		out = append(out, Link{Transport: t, Peer: p, Stream: 1<<31 | uint32(stage)<<20 | uint32(lo)<<10 | uint32(hi)})
	}
	return out
}

func (a *Allreduce) check(stage, replica int, params int) error {
	switch {
	case stage >= maxRingStages:
		return fmt.Errorf("allreduce: stage %d, want below %d", stage, maxRingStages)
	case params > maxRingParams:
		return fmt.Errorf("allreduce: %d dense parameters in the stage, want at most %d", params, maxRingParams)
	case replica >= len(a.Peers):
		return fmt.Errorf("allreduce: replica %d of %d peers", replica, len(a.Peers))
	case a.Transport == nil && len(a.Peers) > 1:
		return errors.New("allreduce: no transport")
	case a.CheckpointEvery < 0 || a.CheckpointGrid < 0:
		return fmt.Errorf("allreduce: checkpoints every %d steps on a grid of %d, want >= 0", a.CheckpointEvery, a.CheckpointGrid)
	case a.Mirror != nil && a.CheckpointEvery < 1 && a.CheckpointGrid < 1:
		return fmt.Errorf("allreduce: a mirror with checkpoints every %d steps on a grid of %d, want one >= 1", a.CheckpointEvery, a.CheckpointGrid)
	}
	for _, r := range a.Relieve {
		if r < 0 || r >= len(a.Peers) {
			return fmt.Errorf("allreduce: relieve replica %d of %d", r, len(a.Peers))
		}
	}
	return nil
}

// ring is one step's ring: the members in order and this replica's place.
type ring struct {
	t           wire.Transport
	job         uint64
	stage, step int64
	members     []int
	members64   []int64 // members, as every message carries them
	pos         int
	nodes       []string // the members' transport ids, in ring order
	// kernels names what computes this member's sums and updates (its
	// backend and the sum kernel's ISA): a swap's messages carry it.
	kernels string
	// reducer is the place of the member that reduces a pair alone
	// (Allreduce.Relieve), -1 when both do.
	reducer int
}

func newRing(a *Allreduce, job uint64, stage int, step int64, members []int, replica int) (*ring, error) {
	pos, ok := slices.BinarySearch(members, replica)
	if !ok {
		return nil, fmt.Errorf("allreduce: replica %d is not among the members %v", replica, members)
	}
	for _, m := range members {
		if m >= len(a.Peers) {
			return nil, fmt.Errorf("allreduce: member %d, but %d peers are known", m, len(a.Peers))
		}
	}
	n := len(members)
	m64 := make([]int64, n)
	nodes := make([]string, n)
	for i, m := range members {
		m64[i], nodes[i] = int64(m), a.Peers[m]
	}
	return &ring{t: a.Transport, job: job, stage: int64(stage), step: step, members: members, members64: m64, pos: pos,
		nodes: nodes, kernels: sumKernels(), reducer: pairReducer(members, a.Relieve)}, nil
}

// pairReducer is the place of the member of a ring of two that reduces
// alone: the one not relieved, when the other is; else -1.
func pairReducer(members, relieve []int) int {
	if len(members) != 2 {
		return -1
	}
	first, second := slices.Contains(relieve, members[0]), slices.Contains(relieve, members[1])
	switch {
	case first && !second:
		return 1
	case second && !first:
		return 0
	}
	return -1
}

// ownerUpdate shards the optimiser over the ring (reduce's u): the member
// that finishes a chunk of the reduced gradient updates that chunk of the
// parameter, and the allgather passes on the parameter's new values
// instead of the gradient, so that each member runs the optimiser on 1/n of
// the elements and keeps the optimiser state of its own chunk only. The
// update is elementwise, so every element gets the bits a member updating
// the whole parameter would give it.
type ownerUpdate struct {
	w     []float32              // the parameter's values, as long as g
	apply func(lo, hi int) error // updates w[lo:hi] (and its state) from the finished g[lo:hi]
	state []native.HostBuffer    // the parameter's optimiser state, each as long as g
	// snapshot: the ring's first member also collects every other owner's
	// chunk of the state into its own state (for the mirror on the
	// parameter servers, which takes it whole); each other owner sends its
	// chunk there as it updates it.
	snapshot bool
}

// reduce replaces g, this member's gradient of dense parameter param over
// rows rows, by the rows-weighted mean of every member's: Σ b_k g_k / Σ b.
// Chunks travel piece by piece, and a member passes each piece on as soon
// as it has added its part to it (reduce-scatter) or received it
// (allgather), so that large chunks stream around the ring. A member
// scales only the chunk it starts with by its rows; the others it weighs
// as it adds them to what arrives (one pass each, native WeightedSum), and
// the owner of a finished chunk weighs both terms by 1/Σb instead of
// dividing the sum after.
//
// With u, the owner updates each finished piece of its chunk at once and
// the allgather carries u.w: every member ends with the updated values in
// u.w, and g holds the mean over its own chunk only.
func (r *ring) reduce(ctx context.Context, param int, g []float32, rows int, u *ownerUpdate) error {
	switch n := len(r.members); {
	case n == 1 && u != nil:
		return u.apply(0, len(g))
	case n == 1:
		return nil
	case n == 2:
		return r.swap(ctx, param, g, rows, u)
	case halving(n, len(g)):
		return r.halveAndDouble(ctx, param, g, rows, u)
	}
	return r.passAround(ctx, param, g, rows, u)
}

// passAround is reduce for rings of three or more members: chunks passed
// around the ring.
func (r *ring) passAround(ctx context.Context, param int, g []float32, rows int, u *ownerUpdate) error {
	n := len(r.members)
	fb := float32(rows)
	bounds := chunks(len(g), n)
	span := func(c int) (lo, hi int) { c = ((c % n) + n) % n; return bounds[c], bounds[c+1] }
	gathered := g
	if u != nil {
		gathered = u.w
	}
	x := r.exchange(ctx, param, (r.pos+1)%n, (r.pos+n-1)%n, ringStream)
	var toFirst *ringExchange // this owner's updated state, for the mirror
	if u != nil && u.snapshot && r.pos != 0 {
		toFirst = r.exchange(ctx, param, 0, 0, mirrorStream)
	}
	// Reduce-scatter: round s sends chunk pos-s and receives chunk
	// pos-s-1, to which this member adds its part; round s+1 sends that
	// chunk on, piece by piece as it is added. The messages carry the rows
	// summed into the chunk so far.
	lo, hi := span(r.pos)
	if err := weigh(g[lo:hi], fb, nil, 0); err != nil {
		return err
	}
	for j, piece := range pieces(g[lo:hi]) {
		if err := x.send(0, j, piece, rows); err != nil {
			return err
		}
	}
	total := 0
	for s := range n - 1 {
		lo, hi := span(r.pos - s - 1)
		last := s == n-2
		for j, piece := range pieces(g[lo:hi]) {
			got, sum, err := x.addIn(s, j, piece, fb, false, rows, last) // last: this member owns the chunk
			if err != nil {
				return err
			}
			out := piece
			if last {
				total = sum
			}
			if last && u != nil {
				at := lo + j*ringPiece
				if err := u.finish(toFirst, j, at, len(piece), total); err != nil {
					return err
				}
				out = u.w[at : at+len(piece)]
			}
			if err := x.send(s+1, j, out, got+rows); err != nil {
				return err
			}
		}
	}
	// Allgather: round s receives chunk pos-s, finished by its owner, and
	// passes it on unless the next member owns it.
	for s := range n - 1 {
		lo, hi := span(r.pos - s)
		for j, piece := range pieces(gathered[lo:hi]) {
			if _, err := x.recv(n-1+s, j, len(piece), func(v []float32, _ int) error { copy(piece, v); return nil }); err != nil {
				return err
			}
			if s < n-2 {
				if err := x.send(n+s, j, piece, total); err != nil {
					return err
				}
			}
		}
	}
	return r.collectStates(ctx, param, u, bounds)
}

// collectStates receives, on the ring's first member of a snapshot, every
// other owner's chunk of the optimiser state (ownerUpdate.snapshot); the
// parameter's chunks lie at bounds.
func (r *ring) collectStates(ctx context.Context, param int, u *ownerUpdate, bounds []int) error {
	if u == nil || !u.snapshot || r.pos != 0 {
		return nil
	}
	n := len(r.members)
	for p := 1; p < n; p++ {
		c := ownedChunk(p, n, bounds[n])
		if err := r.recvState(ctx, param, p, u.state, bounds[c], bounds[c+1]); err != nil {
			return err
		}
	}
	return nil
}

// addIn receives piece j of round from x and adds it to piece, which
// holds this member's part times own: piece = own·piece + what came,
// what came weighed by the rows it carries where raw (a partner's own
// gradient, as halving's first round sends it), or, where last (the piece
// is then summed over the ring, and this member owns it), both weighed by
// 1/Σb more, Σb being the rows held here and the rows that came. It
// returns the rows that came and, where last, Σb.
func (x *ringExchange) addIn(round, j int, piece []float32, own float32, raw bool, held int, last bool) (got, total int, err error) {
	got, err = x.recv(round, j, len(piece), func(v []float32, got int) error {
		theirs := float32(1)
		if raw {
			theirs = float32(got)
		}
		if !last {
			return weigh(piece, own, v, theirs)
		}
		total = held + got
		return weigh(piece, own/float32(total), v, theirs/float32(total))
	})
	return got, total, err
}

// finish runs the owner's update of elements [at, at+n), piece j of the
// chunk it finished, and sends their optimiser state on to the ring's
// first member for the mirror (toFirst nil: none).
func (u *ownerUpdate) finish(toFirst *ringExchange, j, at, n, total int) error {
	if err := u.apply(at, at+n); err != nil {
		return err
	}
	return toFirst.sendState(u.state, j, at, at+n, total)
}

// swapRound numbers the messages of a swap, apart from the ring's rounds;
// swapRound+1 carries the updated values of a sharded pair whose kernels
// differ.
const swapRound = 1 << 30

// swap is reduce for a ring of two. Each member sends its whole gradient
// and its rows to the other, and both weigh the two in member order: one
// message each way instead of the ring's two rounds, the same bytes in
// all, and neither member waits for the other to add its part and pass it
// back (a hand-off to a process busy with its own backward). Both hold the
// same bits only if they compute them alike, so the messages name the
// sender's kernels (ring.kernels). Members with the same kernels sum with
// the native kernel, and with u each updates the whole parameter; members
// whose kernels differ (another ISA, another backend) sum with
// sumPortable, whose roundings every machine repeats, and with u each
// updates the chunk it owns and sends the other its new values, as the
// ring's owners do.
func (r *ring) swap(ctx context.Context, param int, g []float32, rows int, u *ownerUpdate) error {
	if r.reducer >= 0 && u != nil {
		return r.reduceOnOne(ctx, param, g, rows, u)
	}
	other := 1 - r.pos
	x := r.exchange(ctx, param, other, other, ringStream)
	parts := pieces(g)
	for j, piece := range parts {
		if err := x.send(swapRound, j, piece, rows); err != nil {
			return err
		}
	}
	total := 0
	for j, piece := range parts {
		_, err := x.recv(swapRound, j, len(piece), func(v []float32, got int) error {
			total = rows + got
			return r.sumPair(piece, v, rows, got, x.peerKernels != r.kernels)
		})
		if err != nil {
			return err
		}
	}
	switch {
	case u == nil:
		return nil
	case x.peerKernels == r.kernels:
		return u.apply(0, len(g))
	}
	return r.swapUpdates(x, u, len(g), total)
}

// sumPair sets mine, this member's piece of rows rows, to the pair's
// weighted mean with theirs, the other's of got rows, weighed in member
// order; portable sums with sumPortable.
func (r *ring) sumPair(mine, theirs []float32, rows, got int, portable bool) error {
	total := float32(rows + got)
	x0, w0, x1, w1 := mine, float32(rows)/total, theirs, float32(got)/total
	if r.pos == 1 {
		x0, w0, x1, w1 = x1, w1, x0, w0
	}
	if portable {
		sumPortable(mine, w0, x0, w1, x1)
		return nil
	}
	return ringCPU().WeightedSum(native.HostBuffer(mine), []float32{w0, w1},
		[]native.Buffer{native.HostBuffer(x0), native.HostBuffer(x1)})
}

// reduceOnOne is reduce for a pair of which one member, r.reducer, sums
// and updates alone: the other sends its gradient and rows and takes back
// the new values of every piece, which the reducer updates and returns
// piece by piece as the gradient's pieces arrive; at a mirror's step the
// ring's first member also takes the reducer's optimiser state (the
// reducer keeps the whole of it, the other member's goes stale). The sum
// is the swap's, weighted in member order, so the values are the bits
// both members of a swap of equal kernels compute; only the reducer's
// kernels compute them. The relieved member's CPU goes to what else its
// node runs (its parameter-server shard); on the 2-core VM skipping its
// sum and update made a 2-node ctrdnn job up to 4 % faster.
func (r *ring) reduceOnOne(ctx context.Context, param int, g []float32, rows int, u *ownerUpdate) error {
	x := r.exchange(ctx, param, 1-r.pos, 1-r.pos, ringStream)
	if r.pos != r.reducer {
		return r.sendForReduction(x, g, rows, u)
	}
	parts, total := pieces(g), 0
	for j, piece := range parts {
		_, err := x.recv(swapRound, j, len(piece), func(v []float32, got int) error {
			total = rows + got
			return r.sumPair(piece, v, rows, got, false)
		})
		if err != nil {
			return err
		}
		lo := j * ringPiece
		if err := u.apply(lo, lo+len(piece)); err != nil {
			return err
		}
		if err := x.send(swapRound+1, j, u.w[lo:lo+len(piece)], total); err != nil {
			return err
		}
	}
	if !u.snapshot || r.pos == 0 {
		return nil
	}
	for j, piece := range parts {
		lo := j * ringPiece
		if err := x.sendState(u.state, j, lo, lo+len(piece), total); err != nil {
			return err
		}
	}
	return nil
}

// sendForReduction is the relieved member's side of reduceOnOne.
func (r *ring) sendForReduction(x *ringExchange, g []float32, rows int, u *ownerUpdate) error {
	for j, piece := range pieces(g) {
		if err := x.send(swapRound, j, piece, rows); err != nil {
			return err
		}
	}
	for j, piece := range pieces(u.w) {
		if _, err := x.recv(swapRound+1, j, len(piece), func(v []float32, _ int) error { copy(piece, v); return nil }); err != nil {
			return err
		}
	}
	if u.snapshot && r.pos == 0 {
		return x.recvState(u.state, 0, len(g))
	}
	return nil
}

// swapUpdates is a swap's sharded update where the members' kernels
// differ: each updates the chunk it owns and takes the other's new values
// of the other chunk.
func (r *ring) swapUpdates(x *ringExchange, u *ownerUpdate, n, total int) error {
	bounds := chunks(n, 2)
	own, theirs := ownedChunk(r.pos, 2, n), ownedChunk(1-r.pos, 2, n)
	lo, hi := bounds[own], bounds[own+1]
	if err := u.apply(lo, hi); err != nil {
		return err
	}
	for j, piece := range pieces(u.w[lo:hi]) {
		if err := x.send(swapRound+1, j, piece, total); err != nil {
			return err
		}
	}
	lo, hi = bounds[theirs], bounds[theirs+1]
	for j, piece := range pieces(u.w[lo:hi]) {
		if _, err := x.recv(swapRound+1, j, len(piece), func(v []float32, _ int) error { copy(piece, v); return nil }); err != nil {
			return err
		}
	}
	switch {
	case !u.snapshot:
		return nil
	case r.pos == 0:
		return x.recvState(u.state, lo, hi)
	}
	lo, hi = bounds[own], bounds[own+1]
	for j := range pieces(u.w[lo:hi]) {
		at := lo + j*ringPiece
		if err := x.sendState(u.state, j, at, min(at+ringPiece, hi), total); err != nil {
			return err
		}
	}
	return nil
}

// sumPortable sets dst = a*x + b*y elementwise, each product rounded to
// float32 and then the sum: the same bits on every machine (the
// conversions forbid a fused multiply-add). dst may be x or y.
func sumPortable(dst []float32, a float32, x []float32, b float32, y []float32) {
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		dst[i] = float32(a*x[i]) + float32(b*y[i])
	}
}

// ownedChunk is the chunk of a gradient of floats floats that the member
// at place pos of a ring of n finishes: on a ring the reduce-scatter's
// last round adds its part to chunk pos-(n-1); halving leaves each member
// its own (halveAndDouble).
func ownedChunk(pos, n, floats int) int {
	if halving(n, floats) {
		return pos
	}
	return (pos + 1) % n
}

// stateRound numbers the messages that carry optimiser state buffer k to
// the ring's first member (ownerUpdate.snapshot), apart from the swap's.
func stateRound(k int) int { return swapRound + 2 + k }

// sendState sends the ring's first member piece j of this owner's chunk of
// every optimiser state buffer: elements [lo, hi). x nil sends nothing.
func (x *ringExchange) sendState(state []native.HostBuffer, j, lo, hi, rows int) error {
	if x == nil {
		return nil
	}
	for k, st := range state {
		if err := x.send(stateRound(k), j, st[lo:hi], rows); err != nil {
			return err
		}
	}
	return nil
}

// recvState receives, on the ring's first member, the optimiser state of
// elements [lo, hi) of dense parameter param from the member at place p,
// which owns them, into state.
func (r *ring) recvState(ctx context.Context, param, p int, state []native.HostBuffer, lo, hi int) error {
	return r.exchange(ctx, param, p, p, mirrorStream).recvState(state, lo, hi)
}

// recvState receives the optimiser state of elements [lo, hi) from the
// exchange's peer into state.
func (x *ringExchange) recvState(state []native.HostBuffer, lo, hi int) error {
	if len(state) == 0 {
		return nil
	}
	for j, piece := range pieces(state[0][lo:hi]) {
		at := lo + j*ringPiece
		for k, st := range state {
			dst := st[at : at+len(piece)]
			if _, err := x.recv(stateRound(k), j, len(dst), func(v []float32, _ int) error { copy(dst, v); return nil }); err != nil {
				return err
			}
		}
	}
	return nil
}

// ringCPU runs the ring's elementwise sums, on one thread: reductions run
// beside backward's GEMMs.
var ringCPU = sync.OnceValue(func() *native.CPU { return native.MustCPU().WithThreads(1) })

// sumKernels names the kernels the ring sums with (ring.kernels).
var sumKernels = sync.OnceValue(func() string { return ringCPU().Name() })

// weigh sets dst = a*dst + b*src elementwise, or dst = a*dst when src is
// nil: a product rounded, then a sum, as when dst is scaled first.
func weigh(dst []float32, a float32, src []float32, b float32) error {
	if src == nil {
		return ringCPU().WeightedSum(native.HostBuffer(dst), []float32{a}, []native.Buffer{native.HostBuffer(dst)})
	}
	return ringCPU().WeightedSum(native.HostBuffer(dst), []float32{a, b},
		[]native.Buffer{native.HostBuffer(dst), native.HostBuffer(src)})
}

// pieces cuts a chunk into pieces of at most ringPiece floats; an empty
// chunk is one empty piece (it still carries the rows).
func pieces(c []float32) [][]float32 {
	out := [][]float32{c[:min(ringPiece, len(c))]}
	for lo := ringPiece; lo < len(c); lo += ringPiece {
		out = append(out, c[lo:min(lo+ringPiece, len(c))])
	}
	return out
}

// ringExchange is one reduction's traffic with the ring's neighbours.
// Round t is the t-th chunk a member sends (0 .. 2(n-1)-1: reduce-scatter,
// then allgather); messages carry it with the piece in Meta.Micro, so that
// a member notices a predecessor out of step.
type ringExchange struct {
	r                      *ring
	ctx                    context.Context
	param                  int
	to, from               string // the nodes sent to and received from
	sendStream, recvStream uint32
	peerKernels            string // what the last message received named (ring.kernels)
}

// exchange is param's traffic to the member at place to and from the one
// at place from, on the streams stream numbers by sender.
func (r *ring) exchange(ctx context.Context, param, to, from int, stream func(stage, from, param int) uint32) *ringExchange {
	return &ringExchange{r: r, ctx: ctx, param: param, to: r.nodes[to], from: r.nodes[from],
		sendStream: stream(int(r.stage), r.members[r.pos], param), recvStream: stream(int(r.stage), r.members[from], param)}
}

func ringMicro(round, piece int) uint64 { return uint64(round)<<32 | uint64(piece) }

func (x *ringExchange) send(round, piece int, v []float32, rows int) error {
	r := x.r
	m := &wire.Message{Type: wire.MsgGradient,
		Meta: wire.Meta{Job: r.job, Stage: uint64(r.stage), Replica: uint64(r.members[r.pos]), Step: uint64(r.step),
			Key: uint64(x.param), Micro: ringMicro(round, piece), Batch: uint64(rows)},
		Text:    r.kernels,
		Tensors: []wire.Tensor{wire.F32Tensor(v, len(v)), wire.I64Tensor(r.members64, len(r.members64))}}
	if err := r.t.Send(x.ctx, x.to, x.sendStream, m); err != nil {
		return fmt.Errorf("allreduce: send dense parameter %d to %s: %w", x.param, x.to, err)
	}
	return nil
}

// recv receives piece piece of the predecessor's round round, of want
// floats, hands its values and the rows it carries to use while the
// message is held, and returns the rows.
func (x *ringExchange) recv(round, piece, want int, use func(v []float32, rows int) error) (int, error) {
	rows, err := x.r.recvPiece(x.ctx, x.from, x.recvStream, x.param, ringMicro(round, piece), want, func(v []float32, rows int, kernels string) error {
		x.peerKernels = kernels
		return use(v, rows)
	})
	if err != nil {
		return 0, fmt.Errorf("allreduce: dense parameter %d from %s: %w", x.param, x.from, err)
	}
	return rows, nil
}

func (r *ring) recvPiece(ctx context.Context, from string, stream uint32, param int, micro uint64, want int, use func(v []float32, rows int, kernels string) error) (int, error) {
	m, err := wire.RecvShared(ctx, r.t, from, stream)
	for err == nil && (m.Meta.Job != r.job || m.Meta.Step < uint64(r.step)) { // another job's, or a step abandoned
		m.Release()
		m, err = wire.RecvShared(ctx, r.t, from, stream)
	}
	if err != nil {
		return 0, err
	}
	defer m.Release()
	unexpected := func() error {
		err := fmt.Errorf("got %v for step %d parameter %d round %d piece %d, want step %d parameter %d round %d piece %d",
			m.Type, m.Meta.Step, m.Meta.Key, m.Meta.Micro>>32, uint32(m.Meta.Micro), r.step, param, micro>>32, uint32(micro))
		if halvingRounds(m.Meta.Micro>>32) != halvingRounds(micro>>32) {
			err = fmt.Errorf("%w: the members reduce by different algorithms (another heterps version?)", err)
		}
		return err
	}
	if m.Type != wire.MsgGradient || m.Meta.Step != uint64(r.step) || m.Meta.Key != uint64(param) {
		return 0, unexpected()
	}
	if err := m.Want(wire.Float32, wire.Int64); err != nil {
		return 0, err
	}
	// The members before the round: a pair swaps where a ring of more
	// passes chunks, so rings that differ differ in their rounds too.
	if members, err := m.Tensors[1].Int64s(nil); err != nil || !slices.Equal(members, r.members64) {
		return 0, fmt.Errorf("step %d: the predecessor's ring is %v, this replica's %v (%v): a resize reached the replicas at different steps",
			r.step, members, r.members, err)
	}
	if m.Meta.Micro != micro {
		return 0, unexpected()
	}
	v, ok := m.Tensors[0].Float32View()
	if !ok {
		v, err = m.Tensors[0].Float32s(nil)
		if err != nil {
			return 0, err
		}
	}
	if len(v) != want {
		return 0, fmt.Errorf("piece %d holds %d floats, want %d", uint32(micro), len(v), want)
	}
	if m.Meta.Batch < 1 || m.Meta.Batch > 1<<40 {
		return 0, fmt.Errorf("piece %d carries %d rows", uint32(micro), m.Meta.Batch)
	}
	rows := int(m.Meta.Batch)
	return rows, use(v, rows, m.Text)
}
