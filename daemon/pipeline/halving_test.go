package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/wire"
)

// sendCounter is a transport that counts the messages it sends.
type sendCounter struct {
	wire.Transport
	sent atomic.Int64
}

func (c *sendCounter) Send(ctx context.Context, to string, stream uint32, m *wire.Message) error {
	c.sent.Add(1)
	return c.Transport.Send(ctx, to, stream, m)
}

// Rings of four and eight members reduce a small gradient in 2·log2(n)
// messages a member, where passing chunks around takes 2(n-1), and end
// with the same weighted mean to the last bit of a float's rounding; a
// gradient above halvingMaxFloats goes around the ring.
func TestHalvingReducesInLogarithmicRounds(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct{ members, length int }{{4, 1000}, {8, 1000}, {8, halvingMaxFloats}, {8, halvingMaxFloats + 1}} {
		t.Run(fmt.Sprintf("%d members, %d floats", tc.members, tc.length), func(t *testing.T) {
			trs, names := ringTransports(t, tc.members)
			counters := make([]*sendCounter, tc.members)
			for k, tr := range trs {
				counters[k] = &sendCounter{Transport: tr}
				trs[k] = counters[k]
			}
			grads, rows := make([][]float32, tc.members), make([]int, tc.members)
			for k := range grads {
				rows[k] = k + 1
				for i := range tc.length {
					grads[k] = append(grads[k], float32((i*7+k*3)%11)-5)
				}
			}
			sent := func() []int64 {
				out := make([]int64, len(counters))
				for k, c := range counters {
					out[k] = c.sent.Swap(0)
				}
				return out
			}
			halved := reduceAll(t, trs, names, 1, grads, rows)
			perMember := sent()
			halvingOn = false
			ringed := reduceAll(t, trs, names, 2, grads, rows)
			halvingOn = true
			ringPerMember := sent()

			chunk := (tc.length + tc.members - 1) / tc.members
			pieces := max(1, (chunk+ringPiece-1)/ringPiece) // a ring chunk's, each round
			rounds, ringRounds := int64(2*bits.Len(uint(tc.members))-2), int64(2*(tc.members-1)*pieces)
			if tc.length > halvingMaxFloats {
				rounds = ringRounds
			}
			for k := range tc.members {
				if perMember[k] != rounds || ringPerMember[k] != ringRounds {
					t.Fatalf("member %d sent %d messages (ring %d), want %d (ring %d)", k, perMember[k], ringPerMember[k], rounds, ringRounds)
				}
				if !slices.Equal(halved[k], halved[0]) {
					t.Fatalf("member %d holds other bytes than member 0", k)
				}
			}
			for i := range halved[0] {
				if d := halved[0][i] - ringed[0][i]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("element %d: %g halved, %g around the ring", i, halved[0][i], ringed[0][i])
				}
			}
		})
	}
}

// A member that passes chunks around while the others halve (another
// version of heterps) fails the step, naming the mismatch, instead of
// adding the wrong partial sums.
func TestHalvingRefusesAMemberOnTheRing(t *testing.T) {
	checkLeaks(t)
	const n = 4
	trs, names := ringTransports(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() {
			r, err := newRing(&Allreduce{Transport: trs[k], Peers: names}, 1, 0, 1, iotaInts(n), k)
			if err != nil {
				errs[k] = err
				return
			}
			g := make([]float32, 64)
			if k == n-1 {
				errs[k] = r.passAround(ctx, 3, g, 1, nil)
			} else {
				errs[k] = r.halveAndDouble(ctx, 3, g, 1, nil)
			}
			if errs[k] != nil {
				cancel() // as a failed step ends its job's steps
			}
		})
	}
	wg.Wait()
	named := false
	for k, err := range errs {
		if err == nil {
			t.Fatalf("member %d finished a reduction its ring could not agree on", k)
		}
		named = named || strings.Contains(err.Error(), "reduce by different algorithms")
	}
	if !named {
		t.Fatalf("no member named the mismatch: %v", errors.Join(errs...))
	}
}
