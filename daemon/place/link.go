package place

import (
	"context"
	"fmt"
	"math"
)

// Link is a transfer between two cores of this machine, as measured.
type Link struct {
	Latency   float64 // seconds from an op's end to its consumer on the other core starting, for an empty output
	Bandwidth float64 // bytes/s of the output's copy on the way
}

// Link measuring: a chain of linkHops ops alternating between two cores,
// with empty outputs and with outputs of linkBytes (large enough to leave
// the first-level caches, as a layer's activations do).
const (
	linkHops  = 16
	linkBytes = 1 << 20
)

// MeasureLink measures the link between two cores as Execute transfers:
// a chain of ops that do nothing, alternating between two cpu devices
// (pinned to two CPUs, the same one on a single-CPU machine), each op's
// output copied to the next one's device by the producer's goroutine
// and handed to the consumer's. Latency is the fastest step over its
// hops with empty outputs; Bandwidth is linkBytes over what a hop of
// linkBytes adds to that. Fastest of reps steps each.
func MeasureLink(ctx context.Context, reps int) (Link, error) {
	empty, err := perHop(ctx, 0, reps)
	if err != nil {
		return Link{}, err
	}
	full, err := perHop(ctx, linkBytes, reps)
	if err != nil {
		return Link{}, err
	}
	return Link{Latency: empty, Bandwidth: linkBytes / math.Max(full-empty, 1e-9)}, nil
}

// perHop is the fastest step of the chain with outputs of bytes, over its
// hops.
func perHop(ctx context.Context, bytes int64, reps int) (float64, error) {
	g, placement := hopChain(linkHops, bytes)
	devs := []Device{{Name: "core0", Kind: "cpu", Threads: 1}, {Name: "core1", Kind: "cpu", Threads: 1}}
	x, err := newExecutor(g, devs, placement, nil)
	if err != nil {
		return 0, err
	}
	for i := range x.run {
		x.run[i] = func() error { return nil }
	}
	ex, err := executeInTurn(ctx, reps, 0, x)
	if err != nil {
		return 0, err
	}
	return ex[0].Step / (linkHops - 1), nil
}

// hopChain is a chain of hops ops, each reading the one before, with
// outputs of bytes, placed on devices 0 and 1 in turn.
func hopChain(hops int, bytes int64) (*Graph, []int) {
	g := &Graph{Name: "link"}
	placement := make([]int, hops)
	for i := range hops {
		op := Op{Name: fmt.Sprintf("hop%d", i), Kind: KindConcat, Out: bytes}
		if i > 0 {
			op.Inputs = []int{i - 1}
		}
		g.Ops = append(g.Ops, op)
		placement[i] = i % 2
	}
	return g, placement
}
