package main

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// TestRoundTripsTimesEachEchoAfterItsGap: every trip waits for its echo,
// so with a peer that answers after 2 ms each trip lasts at least that,
// and the trips come back sorted for the percentiles.
func TestRoundTripsTimesEachEchoAfterItsGap(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	const delay = 2 * time.Millisecond
	go func() {
		defer b.Close()
		msg := make([]byte, 64)
		for {
			if _, err := io.ReadFull(b, msg); err != nil {
				return
			}
			time.Sleep(delay)
			if _, err := b.Write(msg); err != nil {
				return
			}
		}
	}()
	trips, err := roundTrips(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(trips) != wakeTrips || !slices.IsSorted(trips) {
		t.Fatalf("%d trips (want %d), sorted %t", len(trips), wakeTrips, slices.IsSorted(trips))
	}
	if trips[0] < delay {
		t.Errorf("fastest trip %v, but the echo came %v after each message", trips[0], delay)
	}
}

func TestPercentile(t *testing.T) {
	ds := make([]time.Duration, 101)
	for i := range ds {
		ds[i] = time.Duration(i)
	}
	for _, p := range []int{0, 50, 90, 99, 100} {
		if got := pct(ds, p); got != time.Duration(p) {
			t.Errorf("pct(0..100, %d) = %v", p, got)
		}
	}
}
