package wire

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestLoopbackPairExchangesMessages(t *testing.T) {
	defer goleak.VerifyNone(t)
	a, b, err := LoopbackPair([]byte("0123456789abcdef0123456789abcdef"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := &Message{Type: MsgActivation, Tensors: []Tensor{F32Tensor([]float32{1, 2, 3}, 3)}}
	if err := a.Send(ctx, "b", 1, msg); err != nil {
		t.Fatal(err)
	}
	got, err := b.Recv(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	vals, err := got.Tensors[0].Float32s(nil)
	if err != nil || len(vals) != 3 || vals[2] != 3 {
		t.Fatalf("got %v, %v", vals, err)
	}
}
