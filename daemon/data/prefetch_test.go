package data

import (
	"context"
	"errors"
	"io"
	"reflect"
	"testing"

	"go.uber.org/goleak"
)

func TestPrefetchBatchesGivesTheSourcesBatchesInOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	direct, err := NewSynthetic(DefaultSynthetic(3), Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSynthetic(DefaultSynthetic(3), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := PrefetchBatches(ctx, src, 64, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 5 {
		want, err := direct.Next(ctx, 64)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Next(ctx)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("batch %d differs from the source's own", i)
		}
	}
	for range 2 {
		if _, err := p.Next(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("after the limit: %v, want io.EOF", err)
		}
	}
}

func TestPrefetchDeliversTheErrorAfterTheItemsBeforeIt(t *testing.T) {
	defer goleak.VerifyNone(t)
	bad := errors.New("line 4: bad field")
	n := 0
	p, err := Prefetch(context.Background(), 3, 0, func(context.Context) (int, error) {
		n++
		if n == 4 {
			return 0, bad
		}
		return n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for want := 1; want <= 3; want++ {
		got, err := p.Next(context.Background())
		if err != nil || got != want {
			t.Fatalf("item %d: %d, %v", want, got, err)
		}
	}
	for range 2 {
		if _, err := p.Next(context.Background()); !errors.Is(err, bad) {
			t.Fatalf("after the items: %v, want %v", err, bad)
		}
	}
	if n != 4 {
		t.Fatalf("next called %d times after failing at call 4", n)
	}
}

func TestPrefetchCloseStopsAReaderBlockedOnAFullQueue(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := Prefetch(context.Background(), 1, 0, func(context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Close() // the reader is blocked handing over an item nobody takes
	p.Close()
	for {
		if _, err := p.Next(context.Background()); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("after Close: %v, want context.Canceled", err)
			}
			return
		}
	}
}

func TestPrefetchCancelEndsABlockedReadAndNext(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	entered := make(chan struct{})
	p, err := Prefetch(ctx, 2, 0, func(ctx context.Context) (int, error) {
		close(entered)
		<-ctx.Done() // a source waiting for data that never comes
		return 0, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	<-entered
	cancel()
	if _, err := p.Next(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v, want context.Canceled", err)
	}
}

func TestPrefetchNextReturnsWhenItsOwnContextEnds(t *testing.T) {
	defer goleak.VerifyNone(t)
	release := make(chan struct{})
	p, err := Prefetch(context.Background(), 1, 0, func(ctx context.Context) (int, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with an ended context: %v", err)
	}
	close(release)
}

func TestPrefetchRefusesDepthBelowOne(t *testing.T) {
	if _, err := Prefetch(context.Background(), 0, 0, func(context.Context) (int, error) { return 0, nil }); err == nil {
		t.Fatal("depth 0 accepted")
	}
}
