package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/native"
)

const maxTestPayload = 1 << 20

// testActivation is 5 rows of two parts, widths 2 (needs a gradient) and 1.
func testActivation() nn.Activation {
	a := make([]float32, 10)
	b := make([]float32, 5)
	for i := range a {
		a[i] = float32(i) + 0.5
	}
	for i := range b {
		b[i] = -float32(i)
	}
	return nn.Activation{Rows: 5, Parts: []nn.Part{
		{Buf: native.HostBuffer(a), Width: 2, NeedGrad: true},
		{Buf: native.HostBuffer(b), Width: 1},
	}}
}

func encode(t testing.TB, m *wire.Message) []byte {
	t.Helper()
	p, err := wire.AppendMessage(nil, m, maxTestPayload)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Rows [1, 4) of an activation and its batch arrive as they left, the
// batch's offsets rebased.
func TestActivationRoundTripOfARowRange(t *testing.T) {
	be := native.MustCPU()
	act, batch := testActivation(), testBatch(3, 1, 5)
	m, err := activationMessage(be, wire.Meta{Step: 2}, act, batch, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	view, err := wire.DecodeMessage(m.Type, encode(t, m), maxTestPayload)
	if err != nil {
		t.Fatal(err)
	}
	got, gotBatch, err := decodeActivation(be, view)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rows != 3 || len(got.Parts) != 2 || !got.Parts[0].NeedGrad || got.Parts[1].NeedGrad {
		t.Fatalf("activation %+v", got)
	}
	for j, p := range act.Parts {
		h, _ := native.Host(p.Buf)
		g, _ := native.Host(got.Parts[j].Buf)
		if !slices.Equal(g, h[1*p.Width:4*p.Width]) {
			t.Fatalf("part %d: %v, want rows 1..3 of %v", j, g, h)
		}
	}
	want := sliceBatch(batch, 1, 4)
	if !reflect.DeepEqual(gotBatch, want) {
		t.Fatalf("batch %+v, want %+v", gotBatch, want)
	}
	for i := range 3 {
		for s := range testSlots {
			if !slices.Equal(gotBatch.Bag(i, s), batch.Bag(i+1, s)) {
				t.Fatalf("sample %d slot %d: bag %v, want %v", i, s, gotBatch.Bag(i, s), batch.Bag(i+1, s))
			}
		}
	}
}

// A gradient from a sender with n rows is scaled to the receiver's own
// mean; a part that needs no gradient may come empty.
func TestGradientScaledToOwnRows(t *testing.T) {
	be := native.MustCPU()
	g := testActivation()
	g.Parts[1].Buf = nil
	m, err := gradientMessage(be, wire.Meta{Step: 1}, g, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	view, err := wire.DecodeMessage(m.Type, encode(t, m), maxTestPayload)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeGradient(be, view, testActivation().Parts, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := native.Host(got.Parts[0].Buf)
	want, _ := native.Host(g.Parts[0].Buf)
	for i, v := range h {
		if v != want[i]*5/2 { // mean over the sender's 5 rows -> over own 2
			t.Fatalf("gradient[%d] = %v, want %v", i, v, want[i]*5/2)
		}
	}
	if got.Parts[1].Buf != nil {
		t.Fatal("the part without a gradient got one")
	}
}

func TestStackAndSplitBatches(t *testing.T) {
	a, b := testBatch(1, 1, 3), testBatch(1, 2, 4)
	s, err := concatBatches([]*data.Batch{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*sliceBatch(s, 0, 3), *a) {
		t.Fatalf("first rows of the stack differ from batch a")
	}
	if !reflect.DeepEqual(*sliceBatch(s, 3, 7), *b) {
		t.Fatalf("last rows of the stack differ from batch b")
	}
	if got := chunks(8, 3); !slices.Equal(got, []int{0, 3, 6, 8}) {
		t.Fatalf("chunks(8, 3) = %v", got)
	}
}

// Whatever arrives, decoding returns an error or a checked value; it
// never panics.
func FuzzDecodeExchange(f *testing.F) {
	be := native.MustCPU()
	act, batch := testActivation(), testBatch(3, 1, 5)
	m, err := activationMessage(be, wire.Meta{Step: 1}, act, batch, 0, 5)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encode(f, m))
	g, err := gradientMessage(be, wire.Meta{Step: 1}, act, 0, 5)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encode(f, g))
	f.Fuzz(func(t *testing.T, payload []byte) {
		view, err := wire.DecodeMessage(wire.MsgActivation, payload, maxTestPayload)
		if err != nil {
			return
		}
		if a, b, err := decodeActivation(be, view); err == nil {
			if b.Size != a.Rows || len(b.Offsets) != b.Size*b.Slots+1 {
				t.Fatalf("accepted an inconsistent batch: %d rows, %d offsets, %d slots", b.Size, len(b.Offsets), b.Slots)
			}
		}
		decodeGradient(be, view, act.Parts, 5, 5)
	})
}

// TestLinkDropsAnotherJobsMessages: a message of another job left on a
// stream (a job that ran on the same nodes before) is dropped; the link
// returns its own job's next message.
func TestLinkDropsAnotherJobsMessages(t *testing.T) {
	checkLeaks(t)
	a, b, err := wire.LoopbackPair([]byte("0123456789abcdef0123456789abcdef"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const stream = 7
	for _, job := range []string{"old", testJob} {
		m := &wire.Message{Type: wire.MsgActivation, Meta: wire.Meta{Job: ps.JobKey(job), Step: 3}}
		if err := a.Send(ctx, "b", stream, m); err != nil {
			t.Fatal(err)
		}
	}
	l := Link{Transport: b, Peer: "a", Stream: stream, job: ps.JobKey(testJob)}
	m, err := l.recv(ctx, wire.MsgActivation, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if m.Meta.Job != ps.JobKey(testJob) {
		t.Fatalf("got a message of job key %#x, want %s's", m.Meta.Job, testJob)
	}
}

// TestStepErrorsPutTheCauseFirst: a failed step reports its own error
// first and drops the cancellations it caused in its background work.
func TestStepErrorsPutTheCauseFirst(t *testing.T) {
	cause := errors.New("batch has 22 slots")
	cancelled := fmt.Errorf("pull dense parameters: %w", context.Canceled)
	if got := withConsequences(cause, cancelled, nil); got.Error() != cause.Error() {
		t.Errorf("cause with a cancelled pull: %q, want only the cause", got)
	}
	other := errors.New("shard 0: connection reset")
	got := withConsequences(cause, other, cancelled)
	if !strings.HasPrefix(got.Error(), cause.Error()) || !errors.Is(got, other) || errors.Is(got, context.Canceled) {
		t.Errorf("cause, a real push error and a cancelled send: %q", got)
	}
	if got := withConsequences(nil, other, nil); !errors.Is(got, other) {
		t.Errorf("no step error, a push error: %v", got)
	}
	if got := withConsequences(nil, nil, nil); got != nil {
		t.Errorf("nothing failed: %v", got)
	}
}

// TestStepErrorsSayABackgroundFailureOnce: the step's background group
// returns its first error on every Wait, so a step that failed on it (as
// such, or wrapped by the phase that waited for it) reports it once.
func TestStepErrorsSayABackgroundFailureOnce(t *testing.T) {
	push := errors.New("push emb: shard 1: connection reset")
	for _, stepErr := range []error{push, fmt.Errorf("micro-batch 0: %w", push)} {
		got := withConsequences(stepErr, push, nil)
		if n := strings.Count(got.Error(), push.Error()); n != 1 {
			t.Errorf("step error %q with the same background error: %q says it %d times, want once", stepErr, got, n)
		}
	}
}

// rawActivation is an activation message of rows rows with one part of
// width 1 and the batch tensors as given, as a hostile or broken upstream
// stage could send them.
func rawActivation(rows int, dense wire.Tensor, offsets, ids []int64, labels []float32, classes []int64) *wire.Message {
	part := make([]float32, rows)
	return &wire.Message{Type: wire.MsgActivation, Meta: wire.Meta{Batch: uint64(rows)}, Tensors: []wire.Tensor{
		wire.I64Tensor([]int64{1}, 1), wire.F32Tensor(part, rows, 1),
		dense, wire.I64Tensor(offsets, len(offsets)), wire.I64Tensor(ids, len(ids)),
		wire.F32Tensor(labels, len(labels)), wire.I64Tensor(classes, len(classes))}}
}

// A batch that arrives with an activation is checked before any layer
// reads it: each way its tensors can contradict one another is refused,
// naming what is wrong, and a well-formed one of the same shape passes.
func TestActivationRefusesAnInconsistentBatch(t *testing.T) {
	be := native.MustCPU()
	dense2 := wire.F32Tensor([]float32{1, 2, 3, 4}, 2, 2)
	two := []float32{0, 1}
	for _, tc := range []struct {
		name string
		m    *wire.Message
		want string // "" for accepted
	}{
		{"well formed", rawActivation(2, dense2, []int64{0, 1, 3, 3, 4}, []int64{5, 6, 7, 8}, two, []int64{}), ""},
		{"no offsets", rawActivation(2, dense2, []int64{}, []int64{}, two, []int64{}), "0 offsets for 2 rows"},
		{"bags not a multiple of the rows", rawActivation(2, dense2, []int64{0, 1, 2, 3}, []int64{5, 6, 7}, two, []int64{}), "4 offsets for 2 rows"},
		{"offsets from 1", rawActivation(2, dense2, []int64{1, 1, 2}, []int64{5, 6}, two, []int64{}), "offsets run 1..2 over 2 ids"},
		{"offsets past the ids", rawActivation(2, dense2, []int64{0, 1, 9}, []int64{5, 6}, two, []int64{}), "offsets run 0..9 over 2 ids"},
		{"offsets decreasing", rawActivation(2, dense2, []int64{0, 2, 1, 3, 3}, []int64{5, 6, 7}, two, []int64{}), "offsets decrease at bag 2"},
		{"a negative id", rawActivation(2, dense2, []int64{0, 1, 2}, []int64{5, -6}, two, []int64{}), "negative id -6"},
		{"one label for two rows", rawActivation(2, dense2, []int64{0, 1, 2}, []int64{5, 6}, []float32{1}, []int64{}), "1 labels, 0 classes for 2 rows"},
		{"classes for one row of two", rawActivation(2, dense2, []int64{0, 1, 2}, []int64{5, 6}, two, []int64{3}), "2 labels, 1 classes for 2 rows"},
		{"dense features of three rows", rawActivation(2, wire.F32Tensor(make([]float32, 6), 3, 2), []int64{0, 1, 2}, []int64{5, 6}, two, []int64{}), "batch dense features [3 2], want [2, d]"},
		{"offsets as floats", func() *wire.Message {
			m := rawActivation(2, dense2, []int64{0, 1, 2}, []int64{5, 6}, two, []int64{})
			m.Tensors[3] = wire.F32Tensor([]float32{0, 1, 2}, 3)
			return m
		}(), "batch tensor 1 is float32, want int64"},
	} {
		view, err := wire.DecodeMessage(tc.m.Type, encode(t, tc.m), maxTestPayload)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, b, err := decodeActivation(be, view)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && (b.Slots != 2 || b.Size != 2):
			t.Errorf("%s: %d slots of %d rows, want 2 of 2", tc.name, b.Slots, b.Size)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
